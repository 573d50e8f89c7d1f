"""What specviz hands the engines, checked by the engines' own code, not by our parser (issue 60), each in a
virtual environment of its own (their transformers pins are not ours):

- the `speculators` package loads the folder `export-head --format speculators` writes with its own loader, and
  its draft logits on the target's fused features equal the ones specviz drafts with (fp32, within 1e-4);
- vLLM's SpeculativeConfig and SGLang's ServerArgs, built on this CPU, take the configs the serving advice prints
  for the EAGLE-3-shaped head (its cache folder, and the speculators export) and keep the knobs as printed, and
  vLLM refuses the static tree it no longer has.

Long: the first run installs speculators (about 300 MB with this torch's version from the package index) and vLLM
with SGLang (about 10 GB: vLLM brings its CUDA libraries even where it only reads configs) into the cache's venvs/;
SPECVIZ_SPECULATORS_PYTHON and SPECVIZ_ENGINES_PYTHON name interpreters that have them instead. Skipped where
pip cannot install them."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from specviz.runtime.cache_dir import cache_root
from specviz.runtime.draft_model_spec import resolve_draft
from specviz.runtime.trained_eagle3 import EAGLE3_SPEC
from specviz.engine_configs import sglang, vllm
from specviz.engine_configs.advice import Drafter
from specviz.engine_configs.speculators_export import SPECULATORS_VERSION, Verifier, export_head
from specviz.tree.static_tree import RankAcceptance
from specviz.training.train_eagle3 import eagle3_layers
from specviz.training.train_head import EAGLE3_SHAPE, train

from test_eagle3_head import fused_features
from test_head import TINY_CONFIG

ROUNDTRIP = Path(__file__).parent / "speculators_roundtrip.py"
ENGINE_CHECK = Path(__file__).parent / "engine_configs_check.py"
VLLM_VERSION, SGLANG_VERSION = "0.33.0", "0.5.23"
TOLERANCE = 1e-4   # fp32: the same arithmetic in another order (fused q/k/v, another rotary helper)


def venv_python(variable: str, name: str, installs: list[list[str]]) -> str:
    """The interpreter the environment variable names, else one of a virtual environment under the cache's venvs/,
    made once by the pip commands (argument lists) in turn; skipped where they fail."""
    named = os.environ.get(variable, "").strip()
    if named:
        return named
    folder = cache_root() / "venvs" / name
    python = folder / "bin" / "python"
    if not python.is_file():
        done = subprocess.run([sys.executable, "-m", "venv", str(folder)], capture_output=True, text=True)
        for install in installs:
            if done.returncode != 0:
                break
            try:
                done = subprocess.run([str(python), "-m", "pip", *install], capture_output=True, text=True,
                                      timeout=3600)
            except subprocess.TimeoutExpired as expired:   # a half-installed one is removed below, never reused
                done = subprocess.CompletedProcess(expired.cmd, 1, "", "pip ran past an hour")
        if done.returncode != 0:
            import shutil

            shutil.rmtree(folder, ignore_errors=True)
            pytest.skip(f"{name} could not be installed here: {done.stderr.strip()[-300:]}")
    return str(python)


def speculators_python() -> str:
    """speculators SPECULATORS_VERSION beside this torch. PyPI's torchvision and torchaudio (speculators' declared
    dependencies, unused by its eagle3 model) are built for PyPI's CUDA torch: beside the CPU wheel they fail to
    load, and transformers' import with them, so they are removed."""
    return venv_python("SPECVIZ_SPECULATORS_PYTHON", f"speculators-{SPECULATORS_VERSION}", [
        ["install", "-q", f"speculators=={SPECULATORS_VERSION}", f"torch=={torch.__version__.split('+')[0]}"],
        ["uninstall", "-y", "-q", "torchvision", "torchaudio"]])


def engines_python() -> str:
    """vLLM with its dependencies, and SGLang beside it without its own (its pins differ from vLLM's; what its
    ServerArgs imports besides is added)."""
    return venv_python("SPECVIZ_ENGINES_PYTHON", f"engines-vllm{VLLM_VERSION}-sglang{SGLANG_VERSION}", [
        ["install", "-q", f"vllm=={VLLM_VERSION}"], ["install", "-q", "--no-deps", f"sglang=={SGLANG_VERSION}"],
        ["install", "-q", "orjson", "pybase64", "ipython", "msgspec", "pyzmq"]])


@pytest.fixture(scope="module")
def trained(layered_target):
    """A tiny EAGLE-3-shaped head for the eight-layer target, in its cache folder."""
    return train(layered_target, replace(TINY_CONFIG, unroll=2, head_shape=EAGLE3_SHAPE))


@pytest.mark.long
def test_speculators_own_loader_drafts_the_logits_we_draft(layered_target, trained, tmp_path):
    lm = layered_target
    exported = tmp_path / "speculators"
    export_head(Path(trained.path), exported, "speculators",
                Verifier(lm.name, ("LlamaForCausalLM",), eagle3_layers(lm)),
                embedding=lm.model.get_input_embeddings().weight)
    ids, fused = fused_features(lm, "def add(a, b):\n    return a + b\n\nprint(add(2, 3)) # five")
    fused = fused[0]
    n = ids.shape[1]
    head = resolve_draft(lm, EAGLE3_SPEC, None)
    ours, _ = head.forward(fused[:-1], ids[0, 1:].tolist(), list(range(1, n)),
                           torch.ones(n - 1, n - 1, dtype=torch.bool).tril(), head.new_cache())
    torch.save({"ids": ids[0, 1:].clone(), "fused": fused[:-1].clone()}, tmp_path / "inputs.pt")
    done = subprocess.run([speculators_python(), str(ROUNDTRIP), str(exported), lm.name, str(tmp_path / "inputs.pt"),
                           str(tmp_path / "outputs.pt")], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = torch.load(tmp_path / "outputs.pt")
    assert theirs["version"] == SPECULATORS_VERSION
    assert torch.equal(torch.arange(len(theirs["d2t"])) + theirs["d2t"], head.draft_ids_cpu)
    difference = float((theirs["logits"] - ours).abs().max())
    print(f"speculators {theirs['version']} round trip: largest logit difference {difference:.2e}")
    assert difference <= TOLERANCE


SEQUENCES = [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, 0], [0, 0, 0], [1, 0, 2], [0, 0, 0], [0, 1, 0]] * 4


@pytest.mark.long
def test_vllm_and_sglang_take_the_printed_configs_as_printed(layered_target, trained, tmp_path):
    lm = layered_target
    acceptance = RankAcceptance.from_rank_sequences("test", SEQUENCES, depth=3, max_rank=8)
    cost = lambda tokens: 10.0 + max(0, tokens - 4) * 1.5  # noqa: E731
    drafter = Drafter("eagle3", EAGLE3_SPEC, trained.path)
    exported = tmp_path / "speculators"
    export_head(Path(trained.path), exported, "speculators", Verifier(lm.name, ("LlamaForCausalLM",),
                                                                      eagle3_layers(lm)),
                embedding=lm.model.get_input_embeddings().weight)
    chain = vllm.advise(drafter, acceptance, cost, 0.5)
    from_export = json.dumps({**json.loads(chain.config_text), "model": str(exported)})
    tree = sglang.advise(drafter, acceptance, cost, 0.5)
    removed = json.dumps({**json.loads(chain.config_text), "speculative_token_tree": "[(0,), (1,)]"})
    configs = {"target": lm.name, "vllm": [chain.config_text, from_export], "sglang": [tree.config_text],
               "refused_vllm": [removed]}
    (tmp_path / "configs.json").write_text(json.dumps(configs))
    done = subprocess.run([engines_python(), str(ENGINE_CHECK), str(tmp_path / "configs.json"),
                           str(tmp_path / "results.json")], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert "unavailable" not in results["vllm"] and "unavailable" not in results["sglang"], results
    knobs = dict(chain.knobs)
    for made in results["vllm"]["configs"]:
        assert made["ok"], made
        assert made["method"] == "eagle3" and made["num_speculative_tokens"] == knobs["num_speculative_tokens"]
    [tree_refused] = results["vllm"]["refused"]
    assert not tree_refused["ok"] and "speculative_token_tree" in tree_refused["error"]
    made = results["sglang"]["configs"][0]
    assert made["ok"], made
    assert (made["speculative_algorithm"], made["speculative_draft_model_path"]) == ("EAGLE3", trained.path)
    assert {name: made[name.replace("-", "_")] for name, _ in tree.knobs} == dict(tree.knobs)
