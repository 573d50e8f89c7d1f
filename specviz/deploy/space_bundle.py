"""`python -m specviz space-bundle --out DIR [--hardware zerogpu|cpu] [--torch VERSION]`: exactly what a Hugging
Face Space repository needs, written into DIR.

app.py, specviz/ and assets/ as they are here (no caches), a README.md whose front matter is complete for a Gradio
Space (spaces_config/README.md, with the hardware's Python and suggested hardware), the hardware's requirements.txt
and packages.txt (Debian packages: g++ for the native kernels; without it they fall back to torch's ops), and
`shipped/` (runtime.shipped): the default model's GGUF and each listed model's trained draft head from this
machine's cache, so that a Space starts on the weights every figure here was measured on and never trains a head.

ZeroGPU (the default: a free account's Gradio Spaces run there) takes Python 3.12.12 or 3.10.13 and torch 2.8.0,
2.9.1, 2.10.0 or 2.11.0 only (Hugging Face's ZeroGPU documentation, August 2026); anything else is refused here with
that list rather than by the Space's build."""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from specviz.errors import SpecvizError
from specviz.runtime.draft_head import TRAIN_HINT, cached_head_path, head_file_name
from specviz.runtime.loading import (DEFAULT_MODEL, GGUF_DESCRIPTION, GGUF_FILE, HUB_TWIN_OF_DEFAULT, copy_description,
                                    ensure_default_model_folder, packaged_gguf_dir)
from specviz.drafters.copy_logit_seed import FORMAT as SEED_FORMAT
from specviz.runtime.cache_dir import cache_root
from specviz.runtime.shipped import COPY_LOGITS, HEADS, MODELS, TRAINED

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "spaces_config"
COPIED = ("app.py", "specviz", "assets")
# front matter keys a Space's README must set for this app (Spaces "configuration reference")
REQUIRED_KEYS = ("sdk", "sdk_version", "python_version", "app_file", "models", "preload_from_hub",
                 "suggested_hardware", "license")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", ".pytest_cache")
ZEROGPU_PYTHONS = ("3.12.12", "3.10.13")
ZEROGPU_TORCH = ("2.8.0", "2.9.1", "2.10.0", "2.11.0")


@dataclass(frozen=True)
class SpaceHardware:
    """What a Space of one hardware kind is built with: its front matter's Python and suggested hardware, its
    requirements file under spaces_config/, and the torch releases its build accepts (None: any)."""
    name: str
    python_version: str
    suggested_hardware: str
    requirements: str
    torch_releases: tuple[str, ...] | None


HARDWARE = {
    "zerogpu": SpaceHardware("zerogpu", "3.12.12", "zero-a10g", "requirements.txt", ZEROGPU_TORCH),
    "cpu": SpaceHardware("cpu", "3.11", "cpu-basic", "requirements-cpu.txt", None),
}


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


def _with_value(readme: str, key: str, value: str) -> str:
    """The README with one scalar front matter key set (quoted, as the hub's examples write versions)."""
    return re.sub(rf"^{key}:.*$", f'{key}: "{value}"', readme, count=1, flags=re.M)


def pinned(requirements: str, package: str) -> str | None:
    found = re.search(rf"^{re.escape(package)}==(\S+)", requirements, re.M)
    return found.group(1) if found else None


def _requirements(hardware: SpaceHardware, torch: str | None) -> str:
    text = (CONFIG / hardware.requirements).read_text()
    if torch is not None:
        text = re.sub(r"^torch==\S+", f"torch=={torch}", text, count=1, flags=re.M)
    version = pinned(text, "torch")
    if hardware.torch_releases is not None and version not in hardware.torch_releases:
        raise SpecvizError(f"ZeroGPU builds only with torch {', '.join(hardware.torch_releases)}; "
                           f"torch {version} would fail its build (\"No candidate PyTorch version found for "
                           "ZeroGPU\"). Pick one of those with --torch.")
    return text


def _head_name(model: str) -> str:
    """A listed model's head file name (the hub twin of the default model is the default model's GGUF here)."""
    return head_file_name(DEFAULT_MODEL if model == HUB_TWIN_OF_DEFAULT else model)


def _shipped(out: Path, models: list[str]) -> list[str]:
    """Copy the default model's GGUF (with the config and tokenizer files made of it), its warm copy-logit table and
    every listed model's cached head under out/shipped; notes for what is not there. The default model's head is
    required: without it every visitor's first minutes would go to training it."""
    notes = []
    (out / "shipped" / MODELS).mkdir(parents=True)
    (out / "shipped" / HEADS).mkdir(parents=True)
    shutil.copy2(packaged_gguf_dir() / GGUF_FILE, out / "shipped" / MODELS / GGUF_FILE)
    described = out / "shipped" / MODELS / GGUF_DESCRIPTION  # its config and tokenizer: no pass over its fields
    described.mkdir()
    copy_description(ensure_default_model_folder(), described)
    # the default model's warm copy-logit table, where this machine has built it (else the Space builds it)
    seeds = sorted((cache_root() / "copy_logits").glob(f"*-{DEFAULT_MODEL}-{SEED_FORMAT}.npz"))
    if any((TRAINED / COPY_LOGITS).glob(f"{DEFAULT_MODEL}-*-{SEED_FORMAT}.npz")):
        pass  # the repository's own copy travels with assets/ (runtime.shipped reads it there)
    elif seeds:
        (out / "shipped" / COPY_LOGITS).mkdir()
        shutil.copy2(seeds[0], out / "shipped" / COPY_LOGITS / seeds[0].name)
    else:
        notes.append("no warm copy-logit table cached for the default model: the Space builds it at start-up")
    for model in dict.fromkeys([DEFAULT_MODEL, *models]):
        name = _head_name(model)
        cached = cached_head_path(name)
        if (TRAINED / HEADS / name).is_file():
            continue  # the repository's own head travels with assets/ (runtime.shipped reads it there)
        if cached.is_file():
            shutil.copy2(cached, out / "shipped" / HEADS / name)
        elif name == head_file_name(DEFAULT_MODEL):
            raise SpecvizError(f"No draft head for the default model in this machine's cache ({cached}): "
                               f"{TRAIN_HINT}, then write the bundle again.")
        else:
            notes.append(f"no draft head cached for {model}: the Space drafts it with the copy-logit tree")
    return notes


def write_bundle(out: Path, hardware: str = "zerogpu", torch: str | None = None) -> tuple[list[str], list[str]]:
    """Write the Space repository's files into out (which must be empty or new); the relative paths written and
    notes on what was left out."""
    out = Path(out)
    kind = HARDWARE.get(hardware)
    if kind is None:
        raise SpecvizError(f"Unknown hardware {hardware!r}: choose one of {', '.join(HARDWARE)}.")
    if out.exists() and any(out.iterdir()):
        raise SpecvizError(f"'{out}' is not empty: give a new or empty folder for the Space bundle.")
    requirements = _requirements(kind, torch)
    readme = (CONFIG / "README.md").read_text()
    readme = _with_value(_with_value(readme, "python_version", kind.python_version), "suggested_hardware",
                         kind.suggested_hardware)
    matter = front_matter(readme)
    missing = [k for k in REQUIRED_KEYS if k not in matter]
    if missing:
        raise SpecvizError(f"spaces_config/README.md's front matter lacks {', '.join(missing)}.")
    if kind.name == "zerogpu" and matter["python_version"] not in ZEROGPU_PYTHONS:
        raise SpecvizError(f"ZeroGPU runs Python {' or '.join(ZEROGPU_PYTHONS)} only.")
    out.mkdir(parents=True, exist_ok=True)
    try:
        notes = _shipped(out, list(matter["models"]))
    except BaseException:
        shutil.rmtree(out / "shipped", ignore_errors=True)
        raise
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, out / name, ignore=IGNORED)
        else:
            shutil.copy2(source, out / name)
    (out / "README.md").write_text(readme)
    (out / "requirements.txt").write_text(requirements)
    shutil.copy2(CONFIG / "packages.txt", out / "packages.txt")
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()), notes


def missing_wheels(requirements: str, python_version: str, index: str = "https://pypi.org/simple") -> list[str]:
    """What in a requirements file has no wheel on the package index for CPython python_version on x86-64 Linux
    (a compiled wheel for that Python, an abi3 one, or a pure one whose Requires-Python admits it): one line each,
    [] when every pin exists there. One request per package (PEP 691's JSON simple API)."""
    import json
    import urllib.request

    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    cp = "cp" + "".join(python_version.split(".")[:2])
    problems = []
    for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", requirements, re.M):
        request = urllib.request.Request(f"{index}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                files = json.load(response)["files"]
        except Exception as exc:  # noqa: BLE001 (network, index and JSON errors alike)
            problems.append(f"{name}=={version}: the index did not answer ({type(exc).__name__})")
            continue
        fits = []
        for entry in files:
            filename = entry["filename"]
            parts = filename[:-4].split("-") if filename.endswith(".whl") else []
            if len(parts) < 5 or _normal(parts[0]) != _normal(name) or parts[1] != version:
                continue
            if not re.search(r"(manylinux\w*_x86_64|linux_x86_64|-any)\.whl$", filename):
                continue
            tags = parts[-3:]  # python, abi, platform
            try:
                admits = SpecifierSet(entry.get("requires-python") or "").contains(python_version)
            except InvalidSpecifier:
                admits = True
            if admits and (cp in tags[0].split(".") or tags[1] == "abi3" or tags[0].startswith("py3")):
                fits.append(filename)
        if not fits:
            problems.append(f"{name}=={version}: no wheel for Python {python_version} on x86-64 Linux")
    return problems


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()
