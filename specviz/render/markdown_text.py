"""Text from a run or a trace inside the page's Markdown: shown as written, never read as markup. A trace may
come from anyone (an upload), so a source name, a note or a token's text could carry a link, an image or a
table's pipe; Gradio removes scripts, but not those."""

from __future__ import annotations

import re

from specviz.errors import as_code

# Markdown's punctuation, and ':' and '@', without which a bare URL or address would still become a link
_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>&:@])")


def md_text(text) -> str:
    """text with every character Markdown would read as markup backslash-escaped (newlines become spaces)."""
    return _SPECIAL.sub(r"\\\1", str(text)).replace("\n", " ").replace("\r", " ")


def md_code(text) -> str:
    """text as an inline code span (errors.as_code)."""
    return as_code(text)
