import os
import tempfile
from pathlib import Path

import pytest
import torch

# hermetic: no draft head of this machine's cache or of assets/trained becomes the default draft model, and no
# test offers the Model box's training button (tests that need a head train a tiny one or make a random one)
# One folder per test process: pytest-xdist's workers inherit the folder the controller's conftest made (marked
# by _SPECVIZ_TEST_HEADS), and a head one worker trains must not become another's default; a folder the user set
# is kept.
if os.environ.get("SPECVIZ_HEADS") in (None, os.environ.get("_SPECVIZ_TEST_HEADS")):
    os.environ["SPECVIZ_HEADS"] = os.environ["_SPECVIZ_TEST_HEADS"] = tempfile.mkdtemp(prefix="specviz-test-heads-")
os.environ.setdefault("SPECVIZ_HEAD_TRAINING", "off")
# a cold cache plans on the quick cost curve instead of a full calibration per thread count (minutes each): the
# tests check tokens, not speed; tests of calibration itself unset it (full_calibration below)
os.environ.setdefault("SPECVIZ_FIRST_CURVE", "quick")

from specviz.runtime.shared_resources import shared_model  # noqa: E402

LONG_FLAG = "--long"  # the README names it: `bash tests/run.sh --long`


def pytest_addoption(parser):
    parser.addoption(LONG_FLAG, action="store_true", default=False,
                     help="also run the long statistical tests (marked long; SPECVIZ_LONG_TESTS=1 does the same)")


def pytest_configure(config):
    """--long as the environment says it too: a test module reads it at import, in a process (an xdist worker)
    whose own command line does not carry the flag."""
    if config.getoption(LONG_FLAG):
        os.environ["SPECVIZ_LONG_TESTS"] = "1"


def pytest_collection_modifyitems(config, items):
    """Tests marked long (statistical checks of hundreds of seeded sessions per method) run only when asked
    for: the default run keeps every check of correctness (lossless on real prompts, seeded sampling equal to
    plain decoding for every method, the two fast distribution tests, the browser and the bundle) and stays
    within half an hour on the slower processors here."""
    if config.getoption(LONG_FLAG) or os.environ.get("SPECVIZ_LONG_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason=f"a long statistical test: run with `bash tests/run.sh {LONG_FLAG}`")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def lm():
    """The real default model (packaged GGUF, dequantised once into the cache), fp32 on CPU."""
    from specviz.index import datastore

    model = shared_model(None)
    datastore.ensure(model)  # READER's datastore from the shipped corpus (seconds, once per cache)
    return model


AR_REFERENCE_TOKENS = 48


class ArOutputs(dict):
    """Greedy ar's first AR_REFERENCE_TOKENS tokens on a suite prompt, by prompt id, each run the first time a test
    asks for it: what the lossless tests hold each method to (a run of n tokens against the first n)."""

    def __init__(self, lm):
        from specviz.studies.suite import load_suite

        super().__init__()
        self.lm = lm
        self.suite = {item.id: item for item in load_suite(Path(__file__).parent.parent / "assets" / "suite.jsonl")}

    def __missing__(self, item_id: str) -> list[int]:
        from specviz.engine.session import Session

        session = Session(self.lm, "ar").start(self.suite[item_id].messages)
        session.run(AR_REFERENCE_TOKENS)
        self[item_id] = session.output_ids
        return self[item_id]


@pytest.fixture(scope="session")
def ar_outputs(lm) -> ArOutputs:
    """One ArOutputs for the whole run (tests/test_lossless.py, test_reader.py and test_respec.py share it)."""
    return ArOutputs(lm)


@pytest.fixture(scope="session")
def prefix_ids(lm):
    return lm.tokenizer("The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is",
                        return_tensors="pt").input_ids[0].tolist()


@pytest.fixture(scope="session")
def tiny_models(lm, tmp_path_factory):
    """Two random two-layer Llamas saved as local folders: one with the target's tokenizer, one with a
    ten-word vocabulary of its own."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    root = tmp_path_factory.mktemp("tiny")
    folders = {}
    words = {w: i for i, w in enumerate("<unk> <s> </s> the a cat dog sat ran on".split())}
    other = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    other.pre_tokenizer = pre_tokenizers.Whitespace()
    for name, tokenizer in (("same", lm.tokenizer), ("other", PreTrainedTokenizerFast(
            tokenizer_object=other, unk_token="<unk>", bos_token="<s>", eos_token="</s>"))):
        torch.manual_seed(0)
        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
        LlamaForCausalLM(config).save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        folders[name] = str(root / name)
    yield folders
    # a warm copy-logit table is cached per model under the user's cache folder: theirs are keyed by these
    # temporary folders, so every test run would leave 6 MB more behind
    from specviz.runtime.cache_dir import cache_root

    for stale in (cache_root() / "copy_logits").glob(f"*{root.parent.name}_{root.name}_*"):
        stale.unlink()


@pytest.fixture(scope="session")
def layered_target(lm, tmp_path_factory):
    """A random eight-layer Llama with the default model's tokenizer, deep enough for EAGLE-3's three fused layers
    (2, 4 and 5), saved as a local folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from specviz.runtime.loading import load_model

    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("eagle-target")
    config = LlamaConfig(vocab_size=len(lm.tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=8,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    LlamaForCausalLM(config).save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    yield load_model(str(folder))
    # its warm copy-logit table is cached under the user's cache folder by this temporary folder's name
    from specviz.runtime.cache_dir import cache_root

    for stale in (cache_root() / "copy_logits").glob(f"*{folder.parent.name}_{folder.name}*"):
        stale.unlink()


def native_library_or_skip(kernel, what: str):
    """A native kernel module's loaded library (the `kernel` fixtures of its tests), or a skip that says
    why this machine has none."""
    lib = kernel.library()
    if lib is None:
        pytest.skip(f"no {what} here: {kernel.status()}")
    return lib


def tree_logits_native_and_not(lm, switch: str, prompt: str):
    """The lean forward's logits for one draft tree after `prompt`, with its native kernel `switch`
    ('native_attention' or 'native_glue') on and then off: (on, off)."""
    from specviz.engine.tree_forward import tree_forward
    from specviz.runtime.kv import new_cache
    from specviz.tree.draft_tree import DraftTree

    ids = lm.tokenizer(prompt, return_tensors="pt").input_ids[0].tolist()
    tree = DraftTree(ids[-1])
    tree.add_path([11, 12, 13, 14], "retrieval")
    tree.add_path([15, 16], "logits")
    decoder = lm.decoder
    results = []
    try:
        for native in (True, False):
            setattr(decoder, switch, native)
            cache = new_cache(lm.model.config)
            with torch.inference_mode():
                lm.model(input_ids=torch.tensor([ids[:-1]]), past_key_values=cache, use_cache=True)
            results.append(tree_forward(lm, cache, tree, len(ids) - 1))
    finally:
        setattr(decoder, switch, True)
    return results[0], results[1]


@pytest.fixture(scope="session")
def public_server(tmp_path_factory):
    """The page in public mode as a server of its own (tests/public_server.py), shared by the tests that attack it
    from outside (test_fair_share, test_cost_fuzz): (its process, its URL). Its log goes to a file: a pipe nobody
    reads fills up with Gradio's logged refusals and stalls it."""
    from public_server import started

    with open(tmp_path_factory.mktemp("public-server") / "server.log", "w") as log:
        process, url = started(log)
        yield process, url
        process.kill()
        process.wait(10)


class ScriptedLoad:
    """The machine's load as the cost curve reads it (runtime.machine_load's sample and LoadWatch), from a script
    instead of /proc: `readings` are handed out in turn (the last one again when they run out). Tests of what
    follows from a busy or a quiet machine use it, so that whatever else runs beside the tests moves nothing."""

    def __init__(self, monkeypatch, readings):
        from specviz.engine import costmodel
        from specviz.runtime import machine_load

        self.readings, self.read = list(readings), []
        script = self

        class ScriptedWatch:
            result = None

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.result = script.next()

        for module in (machine_load, costmodel):
            monkeypatch.setattr(module, "sample", lambda seconds=0.5: script.next())
        monkeypatch.setattr(costmodel, "LoadWatch", ScriptedWatch)

    def next(self):
        reading = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        self.read.append(reading)
        return reading


def machine_reading(others_cores: float):
    from specviz.runtime import machine_load

    return machine_load.MachineLoad(others_cores, 0.0, 0.0, 2, 0.5)


@pytest.fixture
def quiet_machine(monkeypatch):
    """The machine's load reads as a quiet one's wherever the cost curve asks: for tests that check what follows
    from a quiet machine, not the reading itself, which other jobs on a CI machine or a laptop would move."""
    quiet = machine_reading(0.0)
    ScriptedLoad(monkeypatch, [quiet])
    return quiet


@pytest.fixture
def tiny_timings_pass(monkeypatch):
    """A tiny model's forwards take a millisecond or two: their order and spread are noise, which the cost curve's
    plausibility checks (made for a real model's curve) would call a busy machine. Tests using this check the
    machine's load, or what follows from it, alone."""
    from specviz.engine import costmodel

    monkeypatch.setattr(costmodel, "plausible", lambda ms: True)
    monkeypatch.setattr(costmodel, "NOISY_SPREAD", float("inf"))
    monkeypatch.setattr(costmodel, "weight_read_ms", lambda lm: None)


@pytest.fixture(autouse=True)
def curves_measured_at_once():
    """Whatever a test started (the app's warm-up registers background calibration), the next test's sessions
    measure a missing curve at once, as the command line does (engine.costmodel.measure_later_with)."""
    yield
    from specviz.engine import costmodel

    costmodel.measure_later_with(None)


@pytest.fixture
def full_calibration(monkeypatch):
    """A test of what a full calibration measures and stores: load_or_calibrate calibrates, as outside the tests."""
    monkeypatch.delenv("SPECVIZ_FIRST_CURVE", raising=False)
