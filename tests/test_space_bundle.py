"""The Space bundle: `python -m specviz space-bundle` writes a repository for ZeroGPU (or, asked, a CPU Space) whose
pins exist for its Python, which ships the default model's GGUF and its draft head, starts with SPACE_ID set
(public mode) and steps through gradio_client. No weights are downloaded: the shipped GGUF is the default model,
the 360M and 1.7B are never loaded here, and the app runs with HF_HUB_OFFLINE=1."""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))
from app_page import counters_of, named  # noqa: E402
from specviz.errors import SpecvizError  # noqa: E402
from specviz.runtime.draft_head import head_file_name  # noqa: E402
from specviz.runtime.loading import DEFAULT_MODEL, GGUF_FILE  # noqa: E402
from specviz.deploy.space_bundle import (REQUIRED_KEYS, ZEROGPU_PYTHONS, ZEROGPU_TORCH, front_matter,  # noqa: E402
                                        missing_wheels, pinned, write_bundle)
from browser_waits import patient_client  # noqa: E402


@pytest.fixture
def heads(tmp_path, monkeypatch):
    """A heads folder holding a head file for the default model (its bytes only matter where the app loads it)."""
    from specviz.deploy import space_bundle

    folder = tmp_path / "heads"
    folder.mkdir()
    monkeypatch.setenv("SPECVIZ_HEADS", str(folder))
    monkeypatch.setattr(space_bundle, "TRAINED", tmp_path / "no-trained-files")  # as if the repository shipped none
    return folder


def test_the_repositorys_own_head_and_table_travel_in_assets(tmp_path, monkeypatch):
    """With no head in this machine's cache the bundle still has the default model's: the repository's own
    (assets/trained), which the Space reads there."""
    from specviz.drafters.copy_logit_seed import FORMAT
    from specviz.runtime.shipped import TRAINED

    monkeypatch.setenv("SPECVIZ_HEADS", str(tmp_path / "empty-heads"))
    files, notes = write_bundle(tmp_path / "space")
    name = head_file_name(DEFAULT_MODEL)
    assert f"assets/trained/heads/{name}" in files and f"shipped/heads/{name}" not in files
    assert any(f.startswith("assets/trained/copy_logits/") and f.endswith(f"-{FORMAT}.npz") for f in files)
    assert (tmp_path / "space" / "assets" / "trained" / "heads" / name).read_bytes() == (TRAINED / "heads" / name).read_bytes()


def test_bundle_holds_exactly_what_a_space_needs(tmp_path, heads):
    with pytest.raises(SpecvizError, match="No draft head for the default model.*train-head"):
        write_bundle(tmp_path / "refused")
    assert not (tmp_path / "refused" / "shipped").exists()
    (heads / head_file_name(DEFAULT_MODEL)).write_bytes(b"head")
    files, notes = write_bundle(tmp_path / "space")
    assert {f.split("/")[0] for f in files} == {"app.py", "specviz", "assets", "README.md", "requirements.txt",
                                                "packages.txt", "shipped"}
    assert f"shipped/models/{GGUF_FILE}" in files and f"shipped/heads/{head_file_name(DEFAULT_MODEL)}" in files
    assert {f"shipped/models/{GGUF_FILE}.files/{name}" for name in ("config.json", "tokenizer.json")} <= set(files)
    assert any("SmolLM2-360M-Instruct" in note for note in notes)  # no head cached for it: said, not fatal
    assert not [f for f in files if "__pycache__" in f or f.endswith((".pyc", ".so"))]
    matter = front_matter((tmp_path / "space" / "README.md").read_text())
    assert all(key in matter for key in REQUIRED_KEYS)
    assert matter["sdk"] == "gradio" and matter["app_file"] == "app.py"
    assert matter["python_version"] in ZEROGPU_PYTHONS and matter["suggested_hardware"] == "zero-a10g"
    for model in ("HuggingFaceTB/SmolLM2-360M-Instruct", "HuggingFaceTB/SmolLM2-1.7B-Instruct"):
        assert model in matter["models"] and model in matter["preload_from_hub"]
    requirements = (tmp_path / "space" / "requirements.txt").read_text()
    assert pinned(requirements, "torch") in ZEROGPU_TORCH and pinned(requirements, "spaces")
    assert pinned(requirements, "gradio") == matter["sdk_version"] and pinned(requirements, "gguf")
    assert "g++" in (tmp_path / "space" / "packages.txt").read_text().split()
    with pytest.raises(Exception, match="not empty"):
        write_bundle(tmp_path / "space")
    # the CPU Space for those who pay, and what ZeroGPU would refuse, refused here with its list
    write_bundle(tmp_path / "cpu", "cpu")
    cpu = front_matter((tmp_path / "cpu" / "README.md").read_text())
    assert cpu["suggested_hardware"] == "cpu-basic" and cpu["python_version"] == "3.11"
    assert pinned((tmp_path / "cpu" / "requirements.txt").read_text(), "torch") == "2.13.0"
    with pytest.raises(SpecvizError, match="torch 2.8.0, 2.9.1, 2.10.0, 2.11.0; torch 2.13.0 would fail"):
        write_bundle(tmp_path / "pinned", torch="2.13.0")
    with pytest.raises(SpecvizError, match="choose one of zerogpu, cpu"):
        write_bundle(tmp_path / "other", "tpu")
    write_bundle(tmp_path / "older", torch="2.9.1")
    assert pinned((tmp_path / "older" / "requirements.txt").read_text(), "torch") == "2.9.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# the long test's app: the bundle's app.py with every model call through the ZeroGPU stand-in (a forked worker per
# call running what spaces.GPU runs, pickles both ways), this process on the threads its CPU quota gives
STANDIN_LAUNCH = ("import runpy, sys; sys.argv = ['app.py']; from zerogpu_standin import forked; "
                  "from specviz.lab import model_calls; model_calls.run_calls_with(forked(model_calls.run_in_gpu_worker)); "
                  "runpy.run_path('app.py', run_name='__main__')")


def _starts_as_a_space_and_steps(python: str, space: Path, tmp_path: Path, install_s: float,
                                 methods: tuple[str, ...] = ("pld",), standin: bool = False) -> None:
    """The bundle's app.py run by python with SPACE_ID set (public mode): the page comes up, each method takes a
    Step and a Run, unified drafts with the shipped head (no training starts), the allow-list refuses a path,
    and no model-loading endpoint is offered."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("SPECVIZ_HEADS", "SPECVIZ_HEAD_TRAINING")}
    env.update({"SPACE_ID": "specviz-tests/specviz", "HF_HUB_OFFLINE": "1", "SPECVIZ_HOST": "127.0.0.1",
                "SPECVIZ_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"})
    command = [python, "app.py"]
    if standin:
        env["PYTHONPATH"] = str(Path(__file__).parent)
        command = [python, "-c", STANDIN_LAUNCH]
    log = open(tmp_path / "app.log", "w")
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=space, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        client = None
        while client is None and time.monotonic() < deadline and process.poll() is None:
            try:
                client = patient_client(f"http://127.0.0.1:{port}/")
            except Exception:  # noqa: BLE001 (not up yet)
                time.sleep(1)
        assert client is not None, (tmp_path / "app.log").read_text()[-3000:]
        page_s = time.perf_counter() - started
        step_s = []
        for method in methods:
            client.predict(api_name="/reset")
            begun = time.perf_counter()
            out = client.predict(max_new_tokens=8, prompt="Say hello twice.", method=method, auto_budget=False,
                                 budget=8, api_name="/step")
            step_s.append(time.perf_counter() - begun)
            assert counters_of(client)["figures"]["steps"] == 1, (method, named(out)["message"])
            ran = named(client.predict(max_new_tokens=8, prompt="Say hello twice.", method=method, auto_budget=False,
                                       budget=8, api_name="/run"))
            assert counters_of(client)["figures"]["new_tokens"] == 8 and "⚠️" not in str(ran["message"]), \
                (method, ran["message"])  # on to the limit
        # the shipped head drafts (no note that it is missing, no training started)
        out = client.predict(max_new_tokens=8, prompt="Say hello twice.", method="unified", draft_model="head",
                             model_stage="on", auto_budget=False, budget=8, api_name="/step")
        assert "Draft head unavailable" not in str(out) and counters_of(client)["figures"]["steps"] == 1, \
            named(out)["message"]
        # a path for the model: the dropdown of the allow-list refuses it before the app sees it, naming the list
        with pytest.raises(Exception, match="takes one of") as refused:
            client.predict(max_new_tokens=8, prompt="Say hello.", method="pld", model="/etc", api_name="/step")
        assert "SmolLM2-360M-Instruct" in str(refused.value) and "/etc" in str(refused.value)
        assert "/load_model" not in client.view_api(print_info=False, return_format="dict")["named_endpoints"]
        print(f"bundle: install {install_s:.0f} s; app page up {page_s:.1f} s after start; a Step took "
              f"{min(step_s):.2f}-{max(step_s):.2f} s over {len(methods)} methods")
    finally:
        process.terminate()
        process.wait(30)
    assert "train-head" not in (tmp_path / "app.log").read_text()  # no background training on a Space


@pytest.fixture
def bundle_with_a_head(lm, tmp_path, monkeypatch):
    """A ZeroGPU bundle whose shipped head is a random head for the default model (CI has no trained one)."""
    from test_head import random_head
    from specviz.runtime.draft_head import save_head

    folder = tmp_path / "heads"
    monkeypatch.setenv("SPECVIZ_HEADS", str(folder))
    head = random_head(lm)
    save_head(head.network, head.record, folder / head_file_name(lm.name))
    files, _ = write_bundle(tmp_path / "space")
    return tmp_path / "space"


@pytest.mark.slow
def test_bundle_resolves_starts_as_a_space_and_steps(bundle_with_a_head, tmp_path):
    """The default run: every pin of the bundle's requirements.txt has a wheel for the front matter's Python on
    the package index, and the bundle's own app.py starts as a Space with this environment's packages, the shipped
    GGUF and head (the long test below installs the bundle's own pins into a fresh Python 3.12)."""
    space = bundle_with_a_head
    started = time.perf_counter()
    python_version = front_matter((space / "README.md").read_text())["python_version"]
    assert missing_wheels((space / "requirements.txt").read_text(), python_version) == []
    _starts_as_a_space_and_steps(sys.executable, space, tmp_path, time.perf_counter() - started)


def python_312() -> str | None:
    """A CPython 3.12 here (pyenv's, else one on PATH)."""
    import glob
    import shutil

    found = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python")))
    return found[-1] if found else shutil.which("python3.12")


@pytest.mark.long
def test_bundle_installs_in_a_fresh_python_312_and_every_method_runs_through_forked_calls(bundle_with_a_head,
                                                                                           tmp_path):
    """Behind --long: the bundle's requirements (torch 2.11.0 with its CUDA libraries: about 5 GB) installed into a
    fresh Python 3.12 environment, the bundle's app started with SPACE_ID and the ZeroGPU stand-in, and every
    method's Step and Run through gradio_client."""
    from specviz.methods import METHODS

    python = python_312()
    if python is None:
        pytest.skip("no Python 3.12 here (pyenv install 3.12)")
    space, venv = bundle_with_a_head, tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    started = time.perf_counter()
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r",
                    str(space / "requirements.txt")], check=True, timeout=2400)
    install_s = time.perf_counter() - started
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys, torch; print(sys.version.split()[0], "
                              "torch.__version__)"], capture_output=True, text=True, check=True).stdout.split()
    print(f"fresh environment: Python {version[0]}, torch {version[1]}")
    assert version[0].startswith("3.12") and version[1].startswith("2.11.0")
    _starts_as_a_space_and_steps(str(venv / "bin" / "python"), space, tmp_path, install_s, tuple(METHODS),
                                 standin=True)
