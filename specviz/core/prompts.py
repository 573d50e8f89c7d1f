"""Turn what the user typed (text, a chat, a file) into the token ids the model sees."""

from __future__ import annotations

import json
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
        raise SpecvizError(f"The prompt is {len(ids)} tokens long; this model's context holds {max_context}. "
                           "Shorten it.")
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
