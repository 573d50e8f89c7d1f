"""Issue 35: the app as a Hugging Face Space. The ZeroGPU path without a GPU (every model call in a forked worker
with pickled arguments and results gives what the in-process app gives, for every method), public mode's
allow-list and limits, refusals that keep the session, the CPU quota, the API's names, the model slots."""

import json
import math
import pickle
import sys
from pathlib import Path

import pytest
import torch

from zerogpu_standin import forked

sys.path.insert(0, str(Path(__file__).parent.parent))
from app_page import page_for  # noqa: E402
from specviz.errors import SpecvizError  # noqa: E402
from specviz.methods import METHODS  # noqa: E402
from specviz.runtime import shared_resources, state_pickle  # noqa: E402
from specviz.lab import model_calls  # noqa: E402
from specviz.lab.compare import Compare  # noqa: E402
from specviz.lab.lab import Lab  # noqa: E402
from specviz.lab.visitor_request import checked_settings  # noqa: E402
from specviz.render.session_view import lab_view  # noqa: E402
from specviz.lab.lab_state import CallAction, CarriedStates, ModelCall, SweepRequest  # noqa: E402
from specviz.lab.public_policy import Policy  # noqa: E402
from specviz.lab.shipped_traces import shipped_traces  # noqa: E402
from specviz.accept.sampling import SamplingSettings  # noqa: E402
from specviz.studies.suite import SuiteItem  # noqa: E402
from specviz.studies.sweep_grid import SweepProgress, SweepReport  # noqa: E402

PROMPT = ("Rename the variable count to total in this function and show the whole function:\n"
          "def tally(items):\n    count = 0\n    for item in items:\n        count += item\n    return count")
DOCUMENT = json.dumps({"document": " ".join(
    f"Ferry {n} leaves the north pier at {6 + n} o'clock and reaches the island an hour later." for n in range(12)),
    "question": "When does ferry 7 leave the north pier?"})
# fixed choices: a fixed budget and each method's settings without a measured choice or a memory of the process
# (Method.state_only), so that every tree depends on the state alone
FIXED = {name: method.state_only for name, method in METHODS.items()}
N = 6  # tokens a walk asks for: two Steps, a Run, a Step after Reset (enough for trees that carry state)


@pytest.fixture
def through_forks():
    """Model calls as ZeroGPU makes them: each in a fresh fork, pickles both ways. One compute thread, here and
    in the forks: GNU OpenMP's thread pool does not survive a fork (a forked child's first parallel region
    waits forever for workers it does not have), and this test process has computed before it forks, which
    ZeroGPU's main process never does (its models sit on cuda there)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    entry = forked(model_calls.run_model)
    model_calls.run_calls_with(entry)
    yield entry.log
    model_calls.run_calls_with(None)
    torch.set_num_threads(threads)


def trail(session) -> tuple:
    """What a run did, to the node: output ids and every step's tree with its statuses."""
    return (list(session.output_ids),
            [[(n.token_id, n.parent, str(n.status)) for n in r.nodes] for r in session.records])


def lab_walk(method: str, prompt: str, temperature: float = 0.0, draft_model: str = "") -> list:
    """Step, Step, Run, then Reset and Step again: what each left."""
    lab = Lab()
    lab.choose_values("", prompt, method, 12, FIXED.get(method, {}), draft_model, temperature=temperature, seed=7)
    seen = []
    for _ in range(2):
        lab.step(N)
        seen.append((trail(lab.session), lab.message))
    for _ in lab.run(N):
        pass
    seen.append((trail(lab.session), lab.message, lab.state.diff))
    lab.reset()
    lab.choose_values("", prompt, method, 12, FIXED.get(method, {}), draft_model, temperature=temperature, seed=7)
    lab.step(N)
    seen.append((trail(lab.session), lab.message))
    return seen


def ab_walk() -> list:
    compare = Compare()
    base = {"model": "", "prompt": PROMPT, "method": "pld", "budget": 12, "params": {}}
    compare.choose(base, "", "method=racer")
    compare.step(N)
    seen = [(trail(compare.a.session), trail(compare.b.session))]
    for _ in compare.run(N):
        pass
    seen.append((trail(compare.a.session), trail(compare.b.session), compare.message))
    return seen


def sweep_walk(lm) -> list:
    request = SweepRequest(model="", mode="", draft_model="", method="racer",
                           prompts=(SuiteItem.of(PROMPT, id="p"),),
                           axes=(("budget", ["4", "8"]),), max_new_tokens=N, params=(), budget=8,
                           sampling=SamplingSettings())
    results = list(model_calls.call(ModelCall(CallAction.SWEEP, (), N, sweep=request), []))
    report = results[-1][2]
    assert isinstance(report, SweepReport) and all(isinstance(r[2], SweepProgress) for r in results[:-1])
    return [(r.values, r.new_tokens, r.steps, r.differing) for r in report.rows]


def test_every_method_gives_the_same_through_forked_calls(lm, through_forks):
    """Under the ZeroGPU stand-in, Step, Run, Reset, A/B, a sweep and rapid give what the in-process app gives,
    to every tree node, for every method (greedy; sampled for racer and rapid)."""
    # every method greedy but racer's two ablations (racer runs both their drafters), ar (every Run's baseline is
    # ar: each walk runs it) and rapid, which runs here sampled only (its RAG drafter and p_hat; greedy it is the
    # same drafter): the state's paths, not its tokens
    cases = [(m, PROMPT, 0.0) for m in METHODS if m not in ("ar", "rapid", "racer-logits", "racer-retrieval")]
    cases += [("racer", PROMPT, 0.8), ("rapid", DOCUMENT, 0.8)]
    for method, prompt, temperature in cases:
        model_calls.run_calls_with(None)
        here = lab_walk(method, prompt, temperature)
        model_calls.run_calls_with(forked(model_calls.run_model, through_forks))
        there = lab_walk(method, prompt, temperature)
        assert there == here, f"{method} at temperature {temperature} differs through forked calls"
        assert here[2][0][0], f"{method} generated nothing"
    model_calls.run_calls_with(None)
    ab_here, sweep_here = ab_walk(), sweep_walk(lm)
    model_calls.run_calls_with(forked(model_calls.run_model, through_forks))
    assert ab_walk() == ab_here and sweep_walk(lm) == sweep_here
    assert through_forks.calls > 4 * len(cases)
    print(f"{through_forks.calls} forked calls; largest argument {max(through_forks.argument_bytes)} bytes")


def test_a_state_is_its_session_plus_keys(lm):
    """A state pickles with the shared resources as keys: the model's weights never travel."""
    lab = Lab()
    lab.choose_values("", PROMPT, "unified", 12, FIXED["unified"])
    lab.step(N)
    blob = pickle.dumps(CarriedStates([lab.state]))
    weights = sum(p.numel() * p.element_size() for p in lm.model.parameters())
    assert len(blob) < weights / 5
    back = pickle.loads(blob).states[0]
    assert back.session.lm is lm and back.session.output_ids == lab.session.output_ids
    assert back.session.method.stages[-1].table.base is lab.session.method.stages[-1].table.base  # warm rows: shared


def test_a_session_drafting_with_the_head_travels_with_the_head_as_a_key(lm, tmp_path, through_forks):
    """The draft head is a shared resource by key: through forked calls unified (sampled) and reader (greedy)
    drafting with it give what the in-process app gives; its state pickles without the head's weights
    and reads back in a process that has to load the head again from its file."""
    from test_head import random_head
    from specviz.runtime.draft_head import DraftHead, save_head

    head = random_head(lm)
    path = save_head(head.network, head.record, tmp_path / "head.safetensors")
    spec = f"head:{path}"
    for method, temperature in (("unified", 0.8), ("reader", 0.0)):  # sampled and greedy, two methods
        model_calls.run_calls_with(None)
        here = lab_walk(method, PROMPT, temperature, spec)
        model_calls.run_calls_with(forked(model_calls.run_model, through_forks))
        assert lab_walk(method, PROMPT, temperature, spec) == here, (method, temperature)
    model_calls.run_calls_with(None)
    lab = Lab()
    lab.choose_values("", PROMPT, "unified", 12, FIXED["unified"], spec)
    lab.step(N)
    drafted = lab.session.method.stages[0].inner.head
    assert isinstance(drafted, DraftHead) and drafted.path == path
    blob = state_pickle.dumps(lab.state)  # refuses a torch module that is not a shared resource: the head is a key
    shared_resources.forget("head")  # as in a fresh worker: the head is loaded again from its key
    back = state_pickle.loads(blob)
    again = back.session.method.stages[0].inner.head
    assert again is not drafted and again.path == path and again.lm is lm
    assert torch.equal(again.network.fc.weight, drafted.network.fc.weight)
    assert back.session.output_ids == lab.session.output_ids


def test_a_state_carries_its_tokens_and_the_caches_are_rebuilt(lm, tmp_path):
    """Carried light (the default), a state leaves every KV cache behind: the session's, its paired `ar`'s, the
    draft head's; the next step rebuilds them with one prefill (the head's features refilled) to within fp32
    rounding of the incremental ones, and the run goes on with the tokens and trees it would have had."""
    from test_head import random_head
    from specviz.runtime.draft_head import save_head
    from specviz.runtime.kv import cache_length

    head = random_head(lm)
    spec = f"head:{save_head(head.network, head.record, tmp_path / 'head.safetensors')}"
    lab = Lab()
    lab.choose_values("", PROMPT, "unified", 12, FIXED["unified"], spec)
    for _ in lab.run(N):  # a Run: the paired `ar` lane holds a cache too
        pass
    whole, light = state_pickle.dumps(lab.state, caches=True), state_pickle.dumps(lab.state)
    context = len(lab.session.context)
    per_token = sum(layer.keys.numel() * 2 * 4 for layer in lab.session.cache.layers) / cache_length(lab.session.cache)
    assert len(whole) > 2 * per_token * context  # the run's cache and its paired ar's at least
    assert len(light) < len(whole) / 10, (len(light), len(whole))
    back = state_pickle.loads(light)
    assert back.session.cache is None and back.paired.ar.cache is None
    assert back.session.cache_to_rebuild == cache_length(lab.session.cache)
    head_stage = back.session.method.stages[0].inner
    assert head_stage.cache.get_seq_length() == 0 and head_stage.known == 0
    ahead = [lab.session.step(3 * N) for _ in range(3)]
    again = [back.session.step(3 * N) for _ in range(3)]
    assert back.session.rebuild_s > 0 and back.session.output_ids == lab.session.output_ids
    assert ([[(n.token_id, n.parent, str(n.status)) for n in r.nodes] for r in again]
            == [[(n.token_id, n.parent, str(n.status)) for n in r.nodes] for r in ahead])
    for mine, theirs in zip(back.session.cache.layers, lab.session.cache.layers):
        assert torch.allclose(mine.keys, theirs.keys, atol=1e-4) and torch.allclose(mine.values, theirs.values, atol=1e-4)
    assert head_stage.known == lab.session.method.stages[0].inner.known
    # the paired ar shares the run's tokens (greedy, lossless): it copies the entries the run rebuilt (one prefill)
    ar, moved_ar = lab.state.paired.ar, back.paired.ar
    moved_ar.ensure_cache()
    shared = min(len(moved_ar.context) - 1, again[0].prefix_len - 1)  # the run rebuilt the entries before its step
    assert moved_ar.rebuild_copied == shared > 0
    for mine, theirs in zip(moved_ar.cache.layers, back.session.cache.layers):
        assert torch.equal(mine.keys[..., :shared, :], theirs.keys[..., :shared, :])
    for _ in range(2):
        ar.step(4 * N)
        moved_ar.step(4 * N)
    assert moved_ar.output_ids == ar.output_ids


def test_the_state_cost_bench_measures_both_ways_of_carrying(lm):
    from specviz.benches.state_cost import measure_state_cost

    whole, rebuilt = measure_state_cost(lm, (200,), "racer", repeats=1, steps=2)
    assert (whole.caches, rebuilt.caches) == ("whole", "rebuilt") and whole.context_tokens >= 160
    assert rebuilt.bytes < whole.bytes / 5 and rebuilt.rebuild_ms > 0 and whole.rebuild_ms == 0
    assert "MB" in rebuilt.line() and "rebuilt in" in rebuilt.line()


def test_refusals_keep_the_session(lm, tiny_models, monkeypatch, through_forks):
    """A draft model with another vocabulary, a Run longer than a call may take, a state written by another
    version: a clear message, and the session as it was."""
    lab = Lab()
    lab.choose_values("", PROMPT, "reader", 12, {})
    lab.step(N)
    kept = trail(lab.session)
    with pytest.raises(SpecvizError, match="another vocabulary"):
        lab.choose_values("", PROMPT, "reader", 12, {}, draft_model=tiny_models["other"])
        lab.step(N)
    assert trail(lab.session) == kept
    lab.choose_values("", PROMPT, "reader", 12, {})
    with pytest.raises(SpecvizError, match=r"at most \d+ tokens"):
        for _ in lab.run(5000):
            pass
    assert trail(lab.session) == kept

    def stale(call, carried):  # the state as another version of the app wrote it
        with monkeypatch.context() as patch:
            patch.setattr(state_pickle, "FORMAT", state_pickle.FORMAT + 1)
            blob = state_pickle.dumps(carried.states)
        yield from model_calls.run_model(call, CarriedStates._from_blob(blob, "cpu"))

    model_calls.run_calls_with(stale)
    with pytest.raises(SpecvizError, match="could not be read back.*Reset"):
        lab.step(N)
    assert trail(lab.session) == kept


PUBLIC = Policy.for_public()


def call_handler(page, lab=None, **settings):
    """/step's handler on a built page, called as Gradio calls it: the lab and the message it answers with."""
    values = {"max_new_tokens": 8, "model": "", "draft_model": "", "mode": "", "prompt": PROMPT, "method": "pld",
              "auto_budget": False, "budget": 8, "temperature": 0.0, "top_p": 1.0, "seed": 0, **settings}
    out = page.stage.on_step(None, lab, **values)
    return out[page.out.lab], out[page.stage.message]


def test_public_mode_refuses_what_is_not_listed(lm, monkeypatch, tmp_path):
    page = page_for(PUBLIC)
    lab, message = call_handler(page)
    assert message == "" and len(lab.session.output_ids) > 0
    kept = trail(lab.session)
    existing, missing = str(tmp_path), str(tmp_path / "no-such-folder")
    answers = []
    for model in (existing, missing, "/etc", "someone/unlisted-model"):
        lab, message = call_handler(page, lab, model=model)
        answers.append(message)
        assert "runs only the models on its list" in message and PUBLIC.models[0] in message
        assert trail(lab.session) == kept
    assert answers[0].replace(existing, "") == answers[1].replace(missing, "")  # nothing about the server's files
    assert str(tmp_path) not in answers[0] and "exist" not in answers[0]
    _, message = call_handler(page, lab, method="reader", draft_model=existing)
    assert "drafts only with" in message
    _, message = call_handler(page, lab, method="reader", draft_model=f"head:{existing}")
    assert "drafts only with" in message and existing not in message  # a head file of one's own is a path
    _, message = call_handler(page, lab, mode="compile")
    assert "compile" in message
    _, message = call_handler(page, lab, max_new_tokens=PUBLIC.max_new_tokens + 1)
    assert f"generates 1 to {PUBLIC.max_new_tokens} new tokens" in message
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (PUBLIC.max_upload_bytes + 1))
    out = page.replay.on_upload(None, lab, str(big))
    assert "at most 4 MB" in out[page.stage.message]
    sweep_message = page.sweep.on_sweep(None, "budget=1,2,3,4,5,6,7,8", "max_breadth=1,2,4,8", "page prompt",
                                            "", 8, "speedup", 8, progress=lambda *a, **k: None, prompt=PROMPT,
                                            method="racer", model="", draft_model="", mode="", auto_budget=False,
                                            budget=8, temperature=0.0, top_p=1.0, seed=0)[page.sweep.message]
    assert "at most 24 runs" in sweep_message
    assert trail(lab.session) == kept


def test_outside_public_mode_a_folder_still_loads(lm, tiny_models, monkeypatch):
    lab, message = call_handler(page_for(Policy.private()), model=tiny_models["same"], method="ar")
    assert message == "" and lab.session.lm.name == tiny_models["same"]


def test_model_slots_release_the_least_recently_used(lm, tiny_models):
    def release_tiny():
        for key in shared_resources.loaded("model"):
            if key[1] in tiny_models.values():
                shared_resources.release(key)

    release_tiny()
    assert shared_resources.shared_model(None) is lm  # the default, most recently used: it stays
    shared_resources.set_model_slots(2)
    try:
        same = shared_resources.shared_model(tiny_models["same"])  # the other models loaded earlier go
        shared_resources.shared_model(None)
        shared_resources.shared_model(tiny_models["other"])  # "same" is now the least recently used
        names = {key[1] for key in shared_resources.loaded("model")}
        assert names == {shared_resources.model_key(None), tiny_models["other"]}, names
        shared_resources.shared_model(None)
        assert shared_resources.shared_model(tiny_models["same"]) is not same  # loaded again ("other" goes)
        assert shared_resources.shared_model(None) is lm
    finally:
        shared_resources.set_model_slots(None)
        release_tiny()


def test_threads_follow_the_cgroup_quota(tmp_path, monkeypatch):
    from specviz.runtime import threads

    monkeypatch.delenv("SPECVIZ_THREADS", raising=False)
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert threads.cgroup_quota(tmp_path) == 1.5
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 16)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert threads.usable_cpus(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_quota(tmp_path) is None and threads.usable_cpus(tmp_path) == 16
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu.cfs_quota_us").write_text("300000\n")
    (tmp_path / "cpu.cfs_period_us").write_text("100000\n")
    assert threads.usable_cpus(tmp_path) == 3
    monkeypatch.setenv("SPECVIZ_THREADS", "5")
    assert threads.usable_cpus(tmp_path) == 5


@pytest.mark.parametrize("public", [False, True])
def test_every_endpoint_has_a_name_and_named_parameters(monkeypatch, public):
    info = page_for(Policy.for_public() if public else Policy.private()).blocks.get_api_info()
    names = set(info["named_endpoints"])
    assert not info.get("unnamed_endpoints")
    for plumbing in ("/on_sweep_metric", "/param_visibility", "/eta_state", "/eta_state_1", "/on_first_view",
                     "/on_node", "/on_accounting", "/on_accounting_1", "/on_token", "/on_tick", "/url_settings",
                     "/on_show", "/on_show_1"):
        assert plumbing not in names
    assert {"/step", "/run", "/ab_step", "/ab_run", "/sweep", "/static_tree", "/reset", "/stop", "/replay"} <= names
    assert ("/load_model" in names) is not public
    for name, endpoint in info["named_endpoints"].items():
        assert not [p for p in endpoint["parameters"] if p["parameter_name"].startswith("param_")], name
    step = [p["parameter_name"] for p in info["named_endpoints"]["/step"]["parameters"]]
    assert step[:4] == ["max_new_tokens", "model", "draft_model", "mode"] and "tau" in step and "eta" in step


def test_a_release_stops_a_run_and_frees_its_session(lm):
    """A visitor who leaves in the middle of a Run: the release stops the Run (it would otherwise step to its
    limit and then run the ar baseline for nobody) and nothing of the session survives it."""
    import gc
    import weakref

    lab = Lab()
    lab.choose_values("", PROMPT, "pld", 8, {})
    run = lab.run(1000, every_s=0)
    next(run)
    held = [weakref.ref(lab.session), weakref.ref(lab.session.cache)]
    lab.release()
    left = sum(1 for _ in run)
    gc.collect()
    assert left <= 2 and lab.session is None
    assert [ref() for ref in held] == [None, None]


def test_a_call_zerogpu_refuses_is_a_message_and_the_session_is_kept(lm):
    """spaces raises gradio's Error with a title when ZeroGPU does not run a call (its client's texts): the visitor
    reads what happened and what works without the GPU, the run stays as it was and goes on once a call runs."""
    import gradio as gr

    lab = Lab()
    lab.choose_values("", PROMPT, "pld", 8, {})
    lab.step(4)
    before = trail(lab.session)
    refusals = [("ZeroGPU quota exceeded", "You have exceeded your free ZeroGPU quota (2s requested vs. 1s left). "
                 "Try again in 0:41:07."),
                ("ZeroGPU illegal duration", "The requested GPU duration (300s) is larger than the maximum allowed"),
                ("ZeroGPU queue timeout", "No GPU was available in the queue")]
    try:
        for title, text in refusals:
            def refusing(call, carried, title=title, text=text):
                raise gr.Error(text, title=title)
                yield  # a generator, as run_model is

            model_calls.run_calls_with(refusing)
            with pytest.raises(SpecvizError) as refused:
                lab.step(4)
            assert title in str(refused.value) and text.rstrip(".") in str(refused.value)
            assert "Replay tab's recorded runs work without the GPU" in str(refused.value)
            assert trail(lab.session) == before
        # what needs no GPU still works meanwhile: the timeline over the run's own steps, a recorded run's replay
        lab.go_to(0)
        assert lab.shown_step() == 0 and lab_view(lab.on_screen()).tree
        recorded = Lab()
        recorded.load_trace(next(iter(shipped_traces().values())))
        recorded.go(1)
        assert recorded.shown_step() is not None and lab_view(recorded.on_screen()).tree
        model_calls.run_calls_with(lambda call, carried: (_ for _ in ()).throw(RuntimeError("worker error: something else")))
        with pytest.raises(RuntimeError, match="something else"):  # not ZeroGPU's: not dressed up as one
            lab.step(4)
    finally:
        model_calls.run_calls_with(None)
    lab.step(4)
    assert len(lab.session.records) == len(before[1]) + 1


def test_on_zero_gpu_the_default_model_runs_on_the_spaces_cpus(lm, monkeypatch):
    """runtime.placement: on ZeroGPU the default model's calls run in this process on the CPUs (no quota, no call's
    fixed cost), the others go through spaces.GPU; a call over both is refused; SPECVIZ_CPU_MODELS changes it."""
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    monkeypatch.setattr(model_calls, "zero_gpu", lambda: True)
    on = lambda model: model_calls.on_cpu(ModelCall(CallAction.STEP, (checked_settings(model, PROMPT, "pld", 8, {}),)))  # noqa: E731
    assert on("") and on("smollm2-135m-instruct") and not on("HuggingFaceTB/SmolLM2-360M-Instruct")
    with pytest.raises(SpecvizError, match="run in different places"):
        model_calls.on_cpu(ModelCall(CallAction.STEP, (checked_settings("", PROMPT, "pld", 8, {}),
                                      checked_settings("HuggingFaceTB/SmolLM2-1.7B-Instruct", PROMPT, "pld", 8, {}))))
    monkeypatch.setenv("SPECVIZ_CPU_MODELS", "none")
    assert not on("")
    monkeypatch.delenv("SPECVIZ_CPU_MODELS")
    model_calls.run_calls_with(lambda call, carried: pytest.fail("a CPU-placed model's call reached the GPU entry"))
    try:
        lab = Lab()
        lab.choose_values("", PROMPT, "pld", 8, {})
        lab.step(4)
        assert len(lab.session.records) == 1
    finally:
        model_calls.run_calls_with(None)
    step, run = (ModelCall(a, (checked_settings("", PROMPT, "pld", 8, {}),), n) for a, n in ((CallAction.STEP, 1), (CallAction.RUN, 128)))
    assert model_calls.call_seconds(step) == 2 and model_calls.call_seconds(run) == 15  # a Step is one step, not 15 s
    # a worker rebuilds the carried caches first: 2 FLOPs per parameter and context token, per session
    lab = Lab()
    lab.choose_values("", PROMPT, "pld", 8, {})
    lab.step(4)
    carried = CarriedStates([lab.state])
    tokens = sum(len(session.context) for session in lab.state.sessions())
    assert model_calls.rebuild_seconds(carried) == pytest.approx(2 * lm.parameter_count * tokens / model_calls.REBUILD_FLOPS)
    assert model_calls.call_seconds(step, carried) == math.ceil(model_calls.CALL_BASE_S + model_calls.SECONDS_PER_TOKEN
                                                                + model_calls.rebuild_seconds(carried))


def test_a_gpu_worker_forked_after_this_process_computed_on_two_threads_still_runs(lm):
    """ZeroGPU forks its workers from a process that may have computed on its CPUs with a thread pool (the
    start-up, a model placed on the CPUs): run_model alone would hang in the child's first parallel region;
    model_calls.run_in_gpu_worker (what spaces.GPU runs) sets one thread first and the call runs."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        lab = Lab()
        lab.choose_values("", PROMPT, "unified", 8, FIXED["unified"])
        lab.step(64)  # this process computes on two threads
        model_calls.run_calls_with(forked(model_calls.run_in_gpu_worker, timeout_s=120))
        lab.step(64)
        lab.step(64)
        assert len(lab.session.records) == 3
    finally:
        model_calls.run_calls_with(None)
        torch.set_num_threads(threads)


def test_no_fork_while_this_process_computes():
    """ui.fork_guard: a GPU call's start waits for CPU work under way; CPU work waits while a fork is under way."""
    import threading

    from browser_waits import wait_until

    from specviz.lab.fork_guard import ForkGuard

    guard, order = ForkGuard(), []

    def stopped(thread: threading.Thread):
        """The thread waits in the guard (its condition's waiter, CPython's threading.Condition._waiters), or
        went through it, which the order then shows."""
        return lambda: len(guard._condition._waiters) > 0 or not thread.is_alive()

    def fork():
        with guard.forking():
            order.append("fork")

    with guard.computing():
        forker = threading.Thread(target=fork)
        forker.start()
        wait_until(stopped(forker), 10, "the fork to reach the guard")
        order.append("computed")
    forker.join(5)
    assert order == ["computed", "fork"]
    with guard.forking():
        computer = threading.Thread(target=lambda: guard.computing().__enter__() or order.append("computing"))
        computer.start()
        wait_until(stopped(computer), 10, "the CPU work to reach the guard")
        order.append("forked")
    computer.join(5)
    assert order[-2:] == ["forked", "computing"]


def test_a_forked_child_gets_free_locks_where_another_thread_held_them():
    """runtime.shared_resources's registry lock, held by another thread at the fork (a model loading as ZeroGPU forks a
    worker), is free in the child (os.register_at_fork), so the child's first shared() does not wait forever."""
    import os
    import threading

    from specviz.runtime import shared_resources

    held, release = threading.Event(), threading.Event()

    def holder():
        with shared_resources._registry_lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(5)
    pid = os.fork()
    if pid == 0:
        os._exit(0 if shared_resources._registry_lock.acquire(timeout=5) else 1)
    release.set()
    thread.join(5)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
