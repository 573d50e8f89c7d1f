"""Benchmark suites: JSONL files of prompts (assets/suite.jsonl, assets/heldout.jsonl) and the app's examples.

A line is one SuiteItem: {"id", "category", "prompt": text | "messages": [{"role", "content"}, ...], optional
"max_new_tokens"}, or a long-context item {"id", "category", "document": a file under the suite's folder,
"question", "reference", optional "max_new_tokens"}, whose prompt is the document followed by the question."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from specviz.runtime.prompts import as_messages, validate_messages
from specviz.errors import SpecvizError

Chat = tuple[tuple[str, str], ...]  # a chat prompt: (role, content) per message, in order
KEYS = ("id", "category", "prompt", "messages", "document", "question", "reference", "max_new_tokens")
PAGE_PROMPT = "prompt"              # the category of a prompt that comes from no suite (the page's, --prompt)


def long_context_prompt(document: str, question: str) -> str:
    """A document and a question as one prompt: the question is the last paragraph (runtime.prompts.PromptText)."""
    return f"{document.strip()}\n\nQuestion: {question.strip()} Answer briefly."


def _text(name: str, value, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip():
        raise SpecvizError(f"\"{name}\" must be a non-empty text, got {json.dumps(value)[:40]}.")
    return value


@dataclass(frozen=True)
class SuiteItem:
    """One prompt of a suite, checked: its id and category are non-empty texts, its prompt a non-empty text or
    a valid chat, its token limit (when it has one) a whole number of at least 1."""
    id: str                            # unique within its suite ("page prompt" for the page's own)
    category: str                      # the group it is reported under ("code", "long-context", ...; PAGE_PROMPT)
    prompt: str | Chat                 # the text (one user message), or a chat of (role, content) pairs
    max_new_tokens: int | None = None  # the item's own limit of new tokens; None: the caller's applies
    document: str | None = None        # long-context: the document's file, relative to the suite's folder
    question: str | None = None        # long-context: the question about it (the prompt's last paragraph)
    reference: str | None = None       # long-context: the expected answer (benches.long_context's exact match)

    def __post_init__(self):
        _text("id", self.id)
        _text("category", self.category)
        if isinstance(self.prompt, str):
            as_messages(self.prompt)  # an empty text is refused
        else:
            validate_messages(self._chat_messages())
        limit = self.max_new_tokens
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise SpecvizError(f"\"max_new_tokens\" must be a whole number of at least 1, got {limit!r}.")
        for name in ("document", "question", "reference"):
            _text(name, getattr(self, name), optional=True)

    def _chat_messages(self) -> list[dict]:
        if not isinstance(self.prompt, tuple) or not all(
                isinstance(m, tuple) and len(m) == 2 for m in self.prompt):
            raise SpecvizError("A suite item's prompt is a text or a chat of (role, content) pairs.")
        return [{"role": role, "content": content} for role, content in self.prompt]

    # ---- made from ------------------------------------------------------------------------------------
    @classmethod
    def of(cls, prompt: str | list[dict] | tuple, id: str = PAGE_PROMPT, category: str = PAGE_PROMPT,
           max_new_tokens: int | None = None) -> "SuiteItem":
        """An item from a text or a list of {"role", "content"} messages (the page's prompt, --prompt, a test's)."""
        if isinstance(prompt, str):
            return cls(id, category, prompt, max_new_tokens)
        if isinstance(prompt, tuple) and all(isinstance(m, tuple) for m in prompt):
            return cls(id, category, prompt, max_new_tokens)
        messages = validate_messages(list(prompt) if isinstance(prompt, tuple) else prompt)
        return cls(id, category, tuple((m["role"], m["content"]) for m in messages), max_new_tokens)

    @classmethod
    def from_dict(cls, data, folder: Path | None = None) -> "SuiteItem":
        """An item from a JSONL line's object; a long-context item's document is read from folder (the suite's).
        SpecvizError naming what is wrong (the caller adds where)."""
        if not isinstance(data, Mapping):
            raise SpecvizError(f"a suite item is a JSON object, got {type(data).__name__}.")
        unknown = [k for k in data if k not in KEYS]
        if unknown:
            raise SpecvizError(f"unknown key(s) {', '.join(map(repr, unknown))}; a suite item has: {', '.join(KEYS)}.")
        missing = [k for k in ("id", "category") if k not in data]
        if missing:
            raise SpecvizError("a suite item needs an \"id\" and a \"category\".")
        given = [k for k in ("prompt", "messages", "document") if k in data]
        if len(given) != 1:
            raise SpecvizError("a suite item needs exactly one of \"prompt\", \"messages\" or \"document\"" +
                               (f", got {' and '.join(given)}." if given else "."))
        limit = data.get("max_new_tokens")
        fields = {"id": data["id"], "category": data["category"], "max_new_tokens": limit}
        if "document" in data:
            if folder is None:
                raise SpecvizError("a long-context item's document is read from its suite's folder.")
            name, question = _text("document", data["document"]), _text("question", data.get("question"))
            document = folder / name
            if not document.is_file():
                raise SpecvizError(f"a long-context item's document file {document} does not exist.")
            return cls(**fields, prompt=long_context_prompt(document.read_text(), question), document=name,
                       question=question, reference=_text("reference", data.get("reference"), optional=True))
        for name in ("question", "reference"):
            if name in data:
                raise SpecvizError(f"\"{name}\" belongs to a long-context item (one with a \"document\").")
        if "prompt" in data:
            return cls(**fields, prompt=_text("prompt", data["prompt"]))
        item = cls.of(data["messages"], fields["id"], fields["category"])
        return replace(item, max_new_tokens=limit)

    # ---- what the engine reads ------------------------------------------------------------------------
    @property
    def is_chat(self) -> bool:
        return not isinstance(self.prompt, str)

    @property
    def messages(self) -> list[dict]:
        """The prompt as chat messages (a fresh list: the caller may change it): what encode, run_method and
        Session.start take."""
        return as_messages(self.prompt) if isinstance(self.prompt, str) else self._chat_messages()

    @property
    def text(self) -> str:
        """The prompt as one text: the text itself, or the chat's last message (what a visitor types)."""
        return self.prompt if isinstance(self.prompt, str) else self.prompt[-1][1]

    def limit(self, default: int) -> int:
        """New tokens a run on this item makes: its own limit, else default."""
        return default if self.max_new_tokens is None else self.max_new_tokens

    def without_limit(self) -> "SuiteItem":
        """The item with its own token limit dropped (a sweep's or a study's token count rules)."""
        return replace(self, max_new_tokens=None) if self.max_new_tokens is not None else self

    def prompt_box(self) -> str:
        """The prompt as the page's prompt box takes it: the text, or the chat as {"messages": [...]} JSON."""
        if isinstance(self.prompt, str):
            return self.prompt
        return json.dumps({"messages": self.messages}, ensure_ascii=False, indent=1)

    def to_dict(self) -> dict:
        """The item as a JSONL line holds it (a long-context item by its document's file, not its text)."""
        data: dict = {"id": self.id, "category": self.category}
        if self.document is not None:
            data.update(document=self.document, question=self.question)
            if self.reference is not None:
                data["reference"] = self.reference
        elif isinstance(self.prompt, str):
            data["prompt"] = self.prompt
        else:
            data["messages"] = self.messages
        if self.max_new_tokens is not None:
            data["max_new_tokens"] = self.max_new_tokens
        return data


def load_suite(path: str | Path) -> list[SuiteItem]:
    """The suite's items in file order (blank lines skipped). SpecvizError naming the file and line for a line that
    is no JSON, no item (a missing or unknown key, an empty prompt, a bad chat, a missing document) or an id
    given twice."""
    path = Path(path)
    if not path.is_file():
        raise SpecvizError(f"Suite file '{path}' does not exist.")
    suite, seen = [], {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecvizError(f"{path}:{number} is not valid JSON: {exc}") from None
        try:
            item = SuiteItem.from_dict(data, path.parent)
        except SpecvizError as error:
            raise SpecvizError(f"{path}:{number}: {error}") from None
        if item.id in seen:
            raise SpecvizError(f"{path}:{number}: the id {item.id!r} is already used on line {seen[item.id]}.")
        seen[item.id] = number
        suite.append(item)
    if not suite:
        raise SpecvizError(f"Suite file '{path}' holds no prompts.")
    return suite


def categories(suite: list[SuiteItem]) -> list[str]:
    """The suite's categories, in the order they first appear."""
    return list(dict.fromkeys(item.category for item in suite))


def example_prompts(suite_path) -> dict[str, str]:
    """Suite prompts as the prompt box takes them: text, or a chat as {"messages": [...]} JSON."""
    return {f"{item.category}: {item.id}": item.prompt_box() for item in load_suite(suite_path)}
