"""Turn what the user typed (text, a chat, a file) into the token ids the model sees."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from specviz.errors import SpecvizError

ROLES = {"system", "user", "assistant"}


def validate_messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise SpecvizError("A chat prompt needs a non-empty list of messages.")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ROLES or not isinstance(message.get("content"), str):
            raise SpecvizError(f"Message {i} must be {{\"role\": one of {sorted(ROLES)}, \"content\": text}}.")
    if not any(m["content"].strip() for m in messages):
        raise SpecvizError("The prompt is empty: write something for the model to answer.")
    return messages


def as_messages(prompt: str | list[dict]) -> list[dict]:
    """A plain text prompt is one user message."""
    if isinstance(prompt, str):
        if not prompt.strip():
            raise SpecvizError("The prompt is empty: write something for the model to answer.")
        return [{"role": "user", "content": prompt}]
    return validate_messages(prompt)


@dataclass(frozen=True)
class PromptText:
    """A prompt as chat messages, read by a method that builds its own context from it (RAPID): the last
    user message is a document followed by a question, its last paragraph (after the last blank line).
    ids: the target's token ids of the prompt, once a session has encoded it."""
    messages: tuple
    ids: tuple = ()

    @classmethod
    def of(cls, prompt: str | list[dict]) -> "PromptText":
        return cls(tuple(dict(m) for m in as_messages(prompt)))

    @property
    def _last_user(self) -> int:
        return max(i for i, m in enumerate(self.messages) if m["role"] == "user") if any(
            m["role"] == "user" for m in self.messages) else len(self.messages) - 1

    def _parts(self) -> tuple[str, str]:
        text = self.messages[self._last_user]["content"].strip()
        head, sep, tail = text.rpartition("\n\n")
        return (head.strip(), tail.strip()) if sep else ("", text)

    @property
    def document(self) -> str:
        return self._parts()[0]

    @property
    def question(self) -> str:
        return self._parts()[1]

    def with_document(self, document: str) -> list[dict]:
        """The same messages with the document replaced (blank: the question alone)."""
        messages = [dict(m) for m in self.messages]
        question = self.question
        messages[self._last_user]["content"] = f"{document}\n\n{question}" if document.strip() else question
        return messages


def encode(tokenizer, prompt: str | list[dict], max_context: int) -> list[int]:
    """Token ids of the prompt under the model's chat template (raw text for a model without one)."""
    messages = as_messages(prompt)
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    else:
        ids = tokenizer("\n\n".join(m["content"] for m in messages))["input_ids"]
    ids = [int(t) for t in ids]
    if len(ids) >= max_context:
        raise SpecvizError(f"The prompt is {len(ids)} tokens long; this model's context holds {max_context} "
                           f"(and the answer needs room too). Shorten it (a document) by at least "
                           f"{len(ids) - max_context + 64} tokens: it is refused rather than silently cut.")
    return ids


def read_prompt_file(path: str | Path) -> str | list[dict]:
    """.txt: one user message; .json: {"messages": [{"role", "content"}, ...]}."""
    path = Path(path)
    if not path.is_file():
        raise SpecvizError(f"Prompt file '{path}' does not exist.")
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SpecvizError(f"Prompt file '{path}' is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or "messages" not in data:
            raise SpecvizError(f"Prompt file '{path}' must hold {{\"messages\": [...]}}.")
        return validate_messages(data["messages"])
    return path.read_text()
