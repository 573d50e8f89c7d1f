"""Benchmark suites: JSONL files of prompts (assets/suite.jsonl, assets/heldout.jsonl) and the app's examples."""

from __future__ import annotations

import json
from pathlib import Path

from specviz.runtime.prompts import as_messages, validate_messages
from specviz.errors import SpecvizError


def long_context_prompt(document: str, question: str) -> str:
    """A document and a question as one prompt: the question is the last paragraph (runtime.prompts.PromptText)."""
    return f"{document.strip()}\n\nQuestion: {question.strip()} Answer briefly."


def load_suite(path: str | Path) -> list[dict]:
    """Lines of {"id", "category", "messages" | "prompt", optional "max_new_tokens"}, or of a long-context
    item {"id", "category", "document": a file under the suite's folder, "question", "reference"}."""
    path = Path(path)
    if not path.is_file():
        raise SpecvizError(f"Suite file '{path}' does not exist.")
    suite = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecvizError(f"{path}:{number} is not valid JSON: {exc}") from exc
        if not isinstance(item, dict) or not {"id", "category"} <= item.keys():
            raise SpecvizError(f"{path}:{number} needs an \"id\" and a \"category\".")
        if "document" in item:
            document = path.parent / item["document"]
            if not document.is_file() or "question" not in item:
                raise SpecvizError(f"{path}:{number}: a long-context item needs a \"question\" and a document "
                                   f"file that exists ({document}).")
            item["prompt"] = long_context_prompt(document.read_text(), item["question"])
            item["messages"] = as_messages(item["prompt"])
        elif "messages" in item:
            item["messages"] = validate_messages(item["messages"])
        elif "prompt" in item:
            item["messages"] = as_messages(item["prompt"])
        else:
            raise SpecvizError(f"{path}:{number} needs \"messages\" or \"prompt\".")
        suite.append(item)
    if not suite:
        raise SpecvizError(f"Suite file '{path}' holds no prompts.")
    return suite


def example_prompts(suite_path) -> dict[str, str]:
    """Suite prompts as the prompt box takes them: text, or a chat as {"messages": [...]} JSON."""
    examples = {}
    for item in load_suite(suite_path):
        label = f"{item['category']}: {item['id']}"
        if "prompt" in item:
            examples[label] = item["prompt"]
        else:
            examples[label] = json.dumps({"messages": item["messages"]}, ensure_ascii=False, indent=1)
    return examples
