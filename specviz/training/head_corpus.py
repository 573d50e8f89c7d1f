"""What the draft head learns from: text that ships with the project or with Python, and answers the target
writes itself, never the benchmark suites.

- the target's own greedy answers to the project's prompts (assets/datastore_prompts.jsonl and
  assets/datastore_corpus.jsonl, READER's datastore text);
- Python's reference documentation (`pydoc_data.topics`, shipped with every CPython) as answers to
  "Explain ..." questions, and the source of a few standard-library modules as answers to "Show me ...";
- the target's own answers made at training time (self-distillation: the head learns the target's
  distributions on the text it drafts for): sampled answers to the project's prompts, and greedy answers
  to questions on Python's reference topics and library functions (`generation_prompts`) and to new
  requests the target writes itself after the project's prompts (`request_prompt`, self-instruct).

The head is trained against the target's distributions on this text (training.train_head), so the text
need not be the target's own; its own answers are the closest to what it drafts for. A guard drops any
text that shares a run of GUARD_WORDS words with a suite prompt, answer or document (assets/suite.jsonl,
assets/heldout.jsonl and the documents their long-context items read): nothing is trained on what the
benchmarks judge.
"""

from __future__ import annotations

import json
import re
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from specviz.index.datastore import ASSETS, CORPUS, read_corpus

SUITES = (ASSETS / "suite.jsonl", ASSETS / "heldout.jsonl")
PROMPTS = ASSETS / "datastore_prompts.jsonl"
GUARD_WORDS = 8
PIECE_CHARS = 1800   # documentation and code are cut into answers of about this many characters
# standard-library modules whose functions the target is asked about (what they do, an example)
LIBRARY_MODULES = ("textwrap", "string", "fractions", "statistics", "heapq", "bisect", "shlex", "difflib", "json",
                   "csv", "calendar", "functools", "itertools", "collections", "random", "math", "re", "datetime",
                   "pathlib", "shutil", "operator", "os.path", "base64", "hashlib", "urllib.parse", "html", "copy",
                   "pprint", "time", "glob", "fnmatch", "zipfile", "uuid", "unicodedata", "locale", "secrets")
LIBRARY_QUESTIONS = ("What does {name} do in Python? Give a short example.",
                     "How do I use {name} in Python?",
                     "Write a short Python example that uses {name}, and explain it.")
# standard-library modules whose source teaches the head Python code (plain, commented, typical)
CODE_MODULES = ("textwrap.py", "string.py", "fractions.py", "statistics.py", "heapq.py", "bisect.py",
                "shlex.py", "difflib.py", "json/encoder.py", "json/decoder.py", "csv.py", "calendar.py",
                "dataclasses.py", "functools.py", "random.py", "glob.py", "fnmatch.py", "colorsys.py")


@dataclass(frozen=True)
class Conversation:
    """A user turn and the assistant's answer, and where the text came from."""
    source: str
    user: str
    answer: str

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.user}, {"role": "assistant", "content": self.answer}]


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _runs(text: str, n: int = GUARD_WORDS) -> set[tuple[str, ...]]:
    words = _words(text)
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


class SuiteGuard:
    """Every run of GUARD_WORDS words in the benchmark suites (prompts, answers, the documents they read)."""

    def __init__(self, suites: tuple[Path, ...] = SUITES):
        self.runs: set[tuple[str, ...]] = set()
        for suite in suites:
            if not suite.is_file():
                continue
            for line in suite.read_text().splitlines():
                if line.strip():
                    self.runs |= _runs(" ".join(self._texts(json.loads(line), suite.parent)))

    @staticmethod
    def _texts(item: dict, folder: Path) -> list[str]:
        texts = [str(item.get(key, "")) for key in ("prompt", "question", "answer", "document_text")]
        texts += [m.get("content", "") for m in item.get("messages", [])]
        if item.get("document") and (folder / item["document"]).is_file():
            texts.append((folder / item["document"]).read_text())
        return texts

    def leaks(self, text: str) -> bool:
        return not self.runs.isdisjoint(_runs(text))


def guarded(conversations: list[Conversation], guard: SuiteGuard) -> tuple[list[Conversation], int]:
    """The conversations that share no run with the suites, and how many were dropped."""
    kept = [c for c in conversations if not guard.leaks(c.user + "\n" + c.answer)]
    return kept, len(conversations) - len(kept)


def project_prompts(path: Path = PROMPTS) -> dict[str, str]:
    """id -> prompt of the project's own prompts (never a suite's)."""
    return {item["id"]: item["prompt"] for item in
            (json.loads(line) for line in path.read_text().splitlines() if line.strip())}


def shipped_answers(corpus: Path = CORPUS, prompts: Path = PROMPTS) -> list[Conversation]:
    """The target's greedy answers that ship in assets/, each under its prompt."""
    by_id = project_prompts(prompts)
    answers = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    read_corpus(corpus)  # the same checks READER's datastore makes of the file
    return [Conversation("answers", by_id[a["id"]], a["response"]) for a in answers if a["id"] in by_id]


def _pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """text cut at blank lines into pieces of about size characters."""
    pieces, current = [], ""
    for block in re.split(r"\n\s*\n", text):
        if current and len(current) + len(block) > size:
            pieces.append(current)
            current = ""
        current = f"{current}\n\n{block}" if current else block
    if current.strip():
        pieces.append(current)
    return [p.strip() for p in pieces if p.strip()]


def python_reference(max_chars: int) -> list[Conversation]:
    """Python's reference documentation (pydoc_data.topics), about max_chars of it, as answers."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # a Python built without its documentation
        return []
    found, total = [], 0
    for name in sorted(topics):
        for i, piece in enumerate(_pieces(topics[name])):
            if total >= max_chars:
                return found
            user = f"Explain the Python topic '{name}'." if i == 0 else f"Go on explaining '{name}'."
            found.append(Conversation("python-docs", user, piece))
            total += len(piece)
    return found


def python_code(max_chars: int) -> list[Conversation]:
    """The source of CODE_MODULES of this Python's standard library, about max_chars of it, as answers."""
    folder = Path(sysconfig.get_paths()["stdlib"])
    found, total = [], 0
    for module in CODE_MODULES:
        path = folder / module
        if not path.is_file():
            continue
        for i, piece in enumerate(_pieces(path.read_text(errors="replace"))):
            if total >= max_chars:
                return found
            user = (f"Show me the start of Python's {module} module." if i == 0
                    else f"Show me the next part of {module}.")
            found.append(Conversation("python-code", user, f"```python\n{piece}\n```"))
            total += len(piece)
    return found


# ---- prompts the target answers at training time ---------------------------------------------------------
def topic_questions() -> list[str]:
    """A question on each of Python's reference topics (pydoc_data.topics)."""
    try:
        from pydoc_data.topics import topics
    except ImportError:
        return []
    return [f"Explain the Python topic '{name}' with a short example." for name in sorted(topics)]


def library_questions() -> list[str]:
    """A question on each public documented function or class of LIBRARY_MODULES (the wording cycles through
    LIBRARY_QUESTIONS)."""
    import importlib

    found = []
    for module_name in LIBRARY_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in sorted(getattr(module, "__all__", None) or dir(module)):
            value = getattr(module, name, None)
            if name.startswith("_") or not callable(value) or not (getattr(value, "__doc__", None) or "").strip():
                continue
            if getattr(value, "__module__", module.__name__) not in (module.__name__, None) and \
                    not str(getattr(value, "__module__", "")).lstrip("_").startswith(module_name.split(".")[0]):
                continue  # re-exported from elsewhere (asked about where it lives)
            found.append(LIBRARY_QUESTIONS[len(found) % len(LIBRARY_QUESTIONS)].format(name=f"{module_name}.{name}"))
    return found


def request_prompt(example: str) -> str:
    """The user turn that asks the target for a new request after one of the project's (self-instruct)."""
    return ("Here is a request someone sent to an assistant:\n\n" + example
            + "\n\nWrite one different request on another subject, in the same style. Reply with the request only.")


def usable_request(text: str) -> str | None:
    """A request the target wrote, cleaned (its first paragraph, unquoted), or None when it is unusable."""
    text = text.strip().split("\n\n")[0].strip().strip('"').strip()
    for lead in ("Request:", "New request:", "Here is a different request:", "Here's a different request:"):
        if text.lower().startswith(lead.lower()):
            text = text[len(lead):].strip()
    return text if 15 <= len(text) <= 400 and len(_words(text)) >= 4 else None
