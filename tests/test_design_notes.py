"""The design notes' package layout is the code's (issue 74, item 6): every package of specviz/ is listed, every
module a list names exists in its package, a package whose modules are listed on lines of their own is listed in
full, and every module path the notes cite (`engine/session.py`, `specviz/lab/lab.py`) exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specviz"
NOTES = ROOT / "docs" / "design.md"


def layout_block() -> list[str]:
    text = NOTES.read_text()
    start = text.index("## Package layout")
    block = text[text.index("```", start) + 3:]
    return block[:block.index("```")].strip("\n").splitlines()


def sections() -> dict[str, list[str]]:
    """Each package line of the block ("  runtime/ ...") with the lines below it, up to the next entry."""
    found: dict[str, list[str]] = {}
    current = None
    for line in layout_block():
        entry = re.match(r"^  (\w+)(/|\.py)", line)
        if entry:
            current = entry.group(1) if entry.group(2) == "/" else None
            if current:
                found[current] = [line]
        elif current and line.startswith("    "):
            found[current].append(line)
    return found


def test_every_package_is_in_the_layout():
    packages = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert set(sections()) == packages


def test_every_module_a_list_names_exists_and_full_lists_are_full():
    missing, incomplete = [], []
    for package, lines in sections().items():
        modules = {f.name for f in (PACKAGE / package).rglob("*.py")}
        named = set(re.findall(r"\b(\w+\.py)\b", " ".join(lines)))
        missing += [f"{package}/{name}" for name in sorted(named - modules)]
        listing = [ln for ln in lines[1:] if re.fullmatch(r"\s+(\w+\.py)(,\s*\w+\.py)*,?", ln)]
        if listing:  # the modules on lines of their own: all of them
            listed = set(re.findall(r"\w+\.py", " ".join(listing)))
            own = {f.name for f in (PACKAGE / package).glob("*.py")} - {"__init__.py"}
            incomplete += [f"{package}/{name}" for name in sorted(own - listed)]
    assert missing == [] and incomplete == [], (missing, incomplete)


def test_every_module_path_the_notes_cite_exists():
    cited = set(re.findall(r"((?:[A-Za-z_0-9]+/)+[A-Za-z_0-9]+\.py)", NOTES.read_text()))
    assert cited, "the pattern finds nothing"
    gone = sorted(p for p in cited if not (ROOT / p).exists() and not (PACKAGE / p).exists())
    assert gone == [], gone
