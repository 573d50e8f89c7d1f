"""The docs' blocks that are derived, not written: the README's method table comes from the method registry, so a
new method appears there by `python -m specviz dev docs` (and tests/test_readme.py fails until it does). A block
sits between `<!-- generated: NAME -->` and `<!-- end generated -->`; everything else in the file is left as it is."""

from __future__ import annotations

import re
from pathlib import Path

from specviz.methods import METHODS

ROOT = Path(__file__).resolve().parents[2]


def method_table() -> str:
    """One row per registered method: its name, what it drafts (Method.summary), whether it follows the target
    exactly at its defaults, and whose settings its defaults are (Method.paper)."""
    rows = ["| method | what it does | lossless at its defaults | settings |", "|---|---|---|---|"]
    for name, method in METHODS.items():
        defaults = method.resolve_params({})
        lossless = "yes" if method.lossless(defaults, 0.0) and method.lossless(defaults, 0.8) else "no"
        settings = (f"ours; the paper's one click away ({method.paper.method})" if method.paper is not None
                    else "ours (no paper)")
        rows.append(f"| `{name}` | {method.summary} | {lossless} | {settings} |")
    return "\n".join(rows)


BLOCKS = {"README.md": {"methods": method_table}}


def rewritten(text: str, blocks: dict) -> str:
    """text with each named block's body replaced by what its function makes now."""
    for name, make in blocks.items():
        pattern = re.compile(rf"(<!-- generated: {name} -->\n)(?:.*?\n)?(<!-- end generated -->)", re.DOTALL)
        if not pattern.search(text):
            raise ValueError(f"no <!-- generated: {name} --> block")
        text = pattern.sub(lambda m: m.group(1) + make() + "\n" + m.group(2), text)
    return text


def stale_files(root: Path = ROOT) -> list[str]:
    """The files whose generated blocks differ from what the code makes now."""
    return [name for name, blocks in BLOCKS.items()
            if rewritten((root / name).read_text(), blocks) != (root / name).read_text()]


def write_blocks(root: Path = ROOT) -> list[str]:
    """Rewrite every stale file's blocks; returns the files changed."""
    changed = stale_files(root)
    for name in changed:
        path = root / name
        path.write_text(rewritten(path.read_text(), BLOCKS[name]))
    return changed
