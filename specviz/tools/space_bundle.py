"""`python -m specviz space-bundle --out DIR`: exactly what a Hugging Face Space repository needs, written into DIR.

app.py, specviz/ and assets/ as they are here (no caches), a README.md whose front matter is complete for a
Gradio Space (from spaces_config/README.md), the Space's requirements.txt (spaces_config/requirements.txt: the
`spaces` package and a torch release it supports on ZeroGPU) and packages.txt (Debian packages: g++ for the native
kernels; without it they fall back to torch's ops)."""

from __future__ import annotations

import shutil
from pathlib import Path

from specviz.errors import SpecvizError

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "spaces_config"
COPIED = ("app.py", "specviz", "assets")
# front matter keys a Space's README must set for this app (Spaces "configuration reference")
REQUIRED_KEYS = ("sdk", "sdk_version", "python_version", "app_file", "models", "preload_from_hub",
                 "suggested_hardware", "license")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", ".pytest_cache")


def front_matter(readme: str) -> dict[str, str | list[str]]:
    """The YAML front matter of a Space README as {key: value or list of items} (the simple shapes it uses)."""
    if not readme.startswith("---\n"):
        raise SpecvizError("The Space README has no front matter (it must start with ---).")
    block = readme[4:readme.index("\n---", 4)]
    values: dict[str, str | list[str]] = {}
    key = None
    for line in block.splitlines():
        if line.startswith("  - ") and key is not None:
            values.setdefault(key, [])
            values[key].append(line[4:].strip())  # type: ignore[union-attr]
        elif ":" in line and not line.startswith(" "):
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip().strip('"')
            if value:
                values[key] = value
    return values


def write_bundle(out: Path) -> list[str]:
    """Write the Space repository's files into out (which must be empty or new); the relative paths written."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise SpecvizError(f"'{out}' is not empty: give a new or empty folder for the Space bundle.")
    readme = (CONFIG / "README.md").read_text()
    matter = front_matter(readme)
    missing = [k for k in REQUIRED_KEYS if k not in matter]
    if missing:
        raise SpecvizError(f"spaces_config/README.md's front matter lacks {', '.join(missing)}.")
    out.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, out / name, ignore=IGNORED)
        else:
            shutil.copy2(source, out / name)
    (out / "README.md").write_text(readme)
    shutil.copy2(CONFIG / "requirements.txt", out / "requirements.txt")
    shutil.copy2(CONFIG / "packages.txt", out / "packages.txt")
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
