"""Issue 58: every request's cost bounded by what it sends, one policy on every path, a fair share per visitor.
The trace holes the cost fuzzer found (tests/test_cost_fuzz.py) are refused by the checks; the page's text is
drawn within stated bounds; sweeps, share links and studies go through the public policy; one visitor holds one
call at a time, a bounded rate and a bounded part of the sessions, and a call stops at its deadline keeping what
it made; private events are not callable by name and every event answers hostile values by index."""

import json
import os
import threading
import time
import urllib.request

import pytest

from specviz.errors import SpecvizError
from specviz.lab import visitors
from specviz.lab.fair_share import CallBudget, FairShare, ShareLimits, Visitor
from specviz.lab.live_sessions import LiveSessions
from specviz.lab.public_policy import Policy
from specviz.records.trace import Trace
from test_cost_fuzz import TraceShape, build_trace

PUBLIC = Policy.for_public()


def shape(**changes) -> TraceShape:
    base = dict(steps=3, nodes=4, committed=2, text_chars=1, sources=1, foreign_sources=False, curve_points=0,
                curve_top=1, null_timing=False, param_items=1)
    return TraceShape(**{**base, **changes})


def refusal(data) -> str:
    with pytest.raises(SpecvizError) as raised:
        Trace.from_dict(json.loads(json.dumps(data)))
    message = str(raised.value)
    assert "\n" not in message and len(message) < 400, message
    return message


# ---- 1. cost bounded by input: the trace holes -------------------------------------------------------------------
def test_a_checked_trace_of_the_same_shape_loads():
    trace = Trace.from_dict(build_trace(shape(curve_points=2, curve_top=16)))
    assert len(trace.steps) == 3 and trace.cost_curve == {"sizes": [8, 16], "ms": [1.0, 2.0]}


def test_the_trace_holes_the_fuzzer_found_are_refused():
    # 20 KB that drew an 80 MB answer: 2,000 committed tokens of a 10,000-character text
    assert "commits 2,000 tokens" in refusal(build_trace(shape(committed=2_000)))
    assert "token_texts" in refusal(build_trace(shape(text_chars=10_000)))
    # a 372-byte cost curve that allocated what it said
    assert "cost_curve" in refusal(build_trace(shape(curve_points=2, curve_top=2_000_000)))
    assert "cost_curve" in refusal({**build_trace(shape()), "cost_curve": {"sizes": [1, 2], "ms": [1]}})
    # sources per node: quadratic to draw; now registered names, each once
    assert "sources" in refusal(build_trace(shape(sources=40_000, foreign_sources=True)))
    assert "sources" in refusal(build_trace(shape(sources=2)))
    # a null time in the middle step broke the session at /go_to
    assert "draft time of step 1" in refusal(build_trace(shape(null_timing=True)))
    # any free-form object: params, a node's meta
    assert "params" in refusal(build_trace(shape(param_items=65)))
    deep = build_trace(shape())
    deep["steps"][0]["nodes"][1]["meta"] = {"logits": {"a": {"b": 1}}}
    assert "meta" in refusal(deep)
    foreign = build_trace(shape())
    foreign["steps"][0]["allocation"] = {"nobody": 3}
    assert "allocation" in refusal(foreign)


def test_the_text_panel_is_bounded_whatever_a_run_commits():
    from specviz.render.step_panels import MAX_SHOWN_TOKENS, tokens_html

    trace = Trace.from_dict(build_trace(shape(steps=40, nodes=1_000, committed=1_000, text_chars=256)))
    html = tokens_html(trace.steps, trace.token_text, prompt="p" * 100_000)
    assert "earlier tokens not shown" in html and "more characters not shown" in html
    assert html.count('data-token="') <= MAX_SHOWN_TOKENS
    assert len(html) < 1_000_000
    assert f'data-token="{40 * 1_000 - 1}"' in html  # the newest token keeps its index in the run


# ---- 2. one policy, every path ----------------------------------------------------------------------------------
def test_a_sweep_axis_cannot_turn_on_what_public_mode_keeps_off():
    from specviz.lab.sweep import Sweep
    from specviz.lab.visitor_request import VisitorRequest
    from test_app import settings

    request = VisitorRequest.from_inputs({k: v for k, v in settings(method="reader", model=PUBLIC.default_model)
                                          .items() if k != "max_new_tokens"}, 8, PUBLIC)
    with pytest.raises(SpecvizError, match="datastore_grow"):
        Sweep(PUBLIC, ()).plan(request, "page prompt", None, ("datastore_grow=0,1", ""), 8)
    planned = Sweep(PUBLIC, ()).plan(request, "page prompt", None, ("budget=4,8", ""), 8)
    assert planned.max_prompt_tokens == PUBLIC.max_prompt_tokens  # the study and the sweep carry the prompt limit


def test_a_share_link_asks_for_no_more_tokens_than_a_step_may():
    settings, notes = PUBLIC.link_settings({"max_new_tokens": 1_024, "method": "pld"}, [])
    assert "max_new_tokens" not in settings and any("1024" in n or "1,024" in n for n in notes)
    assert PUBLIC.link_settings({"max_new_tokens": 512}, [])[0] == {"max_new_tokens": 512}


def test_a_sweeps_prompt_is_held_to_the_prompt_limit(lm):
    from specviz.studies.suite import SuiteItem
    from specviz.lab.lab_state import check_prompt_tokens

    item = SuiteItem.of("word " * 400, id="long")
    check_prompt_tokens(lm, [item], None)
    with pytest.raises(SpecvizError, match="at most 100 tokens"):
        check_prompt_tokens(lm, [item], 100)


# ---- 3. a fair share per visitor ---------------------------------------------------------------------------------
def test_one_call_at_a_time_per_session_and_address_and_a_rate():
    share = FairShare(ShareLimits(tokens_per_minute=100))
    me, my_other_tab, someone = Visitor("s1", "a1"), Visitor("s2", "a1"), Visitor("s3", "a2")
    with share.model_call(me, 10):
        for second in (me, my_other_tab):
            with pytest.raises(SpecvizError, match="still running"):
                with share.model_call(second, 10):
                    pass
        with share.model_call(someone, 10):  # another visitor is served meanwhile
            assert share.running() == 2
    with share.model_call(me, 80):
        pass
    with pytest.raises(SpecvizError, match="100 new tokens per visitor per minute and .*: try again in"):
        with share.model_call(my_other_tab, 20):
            pass
    with pytest.raises(SpecvizError, match="asks for 101 new tokens .* ask for fewer"):  # never, not later
        with share.model_call(someone, 101):
            pass
    with FairShare(None).model_call(me, 10**9) as budget:  # private use: no share
        assert budget.deadline is None


def test_a_call_stops_when_its_visitor_leaves_or_its_time_is_up():
    share = FairShare(ShareLimits(call_seconds=0.05))
    with share.model_call(Visitor("s1", "a1"), 1) as budget:
        budget.check()
        assert share.cancel("s1") == 1
        with pytest.raises(SpecvizError, match="left the page"):
            budget.check()
    with share.model_call(Visitor("s1", "a1"), 1) as budget:
        time.sleep(0.1)
        with pytest.raises(SpecvizError, match="limit of 0 s per call"):
            budget.check()


def test_a_run_past_its_deadline_stops_and_keeps_what_it_made(lm):
    from specviz.lab.lab import Lab
    from test_app import PROMPT

    lab = Lab()
    lab.choose_values("", PROMPT, "pld", 8, {})
    budget = CallBudget(time.monotonic() + 0.5, seconds=0.5)
    with pytest.raises(SpecvizError, match="what it generated is kept"):
        for _ in lab.run(400, every_s=0.05, budget=budget):
            pass
    made = len(lab.session.output_ids)
    assert 0 < made < 400
    lab.step(400)  # the session goes on from there
    assert len(lab.session.output_ids) > made


def test_a_call_past_its_budget_stops_between_the_prompts_chunks(lm, monkeypatch):
    """A long prompt's prefill is one reply: the budget is checked between its chunks too (engine.checkpoints), and
    a call stopped there leaves the visitor's run as it was; alone, the same prompt is read whole."""
    from specviz.engine import session as session_module
    from specviz.lab.lab import Lab
    from test_app import PROMPT

    chunks = []
    forward = session_module.causal_forward
    monkeypatch.setattr(session_module, "PREFILL_CHUNK", 4)
    monkeypatch.setattr(session_module, "causal_forward", lambda *a, **k: chunks.append(len(a[2])) or forward(*a, **k))
    lab = Lab()
    lab.choose_values("", PROMPT, "pld", 8, {})
    contended = CallBudget(time.monotonic() + 120, seconds=120, started=time.monotonic() - 30, contended_s=10,
                           others_waiting=lambda: True)
    with pytest.raises(SpecvizError, match="after 30 s to let other visitors' calls run; it was still reading the "
                                           "prompt, and your run is as it was"):
        lab.step(8, budget=contended)
    assert chunks == [4] and lab.session is None  # stopped after the prompt's first chunk, nothing started
    lab.step(8)
    assert lab.session is not None and len(lab.session.output_ids) > 0 and len(chunks) > 3


def test_a_call_past_its_budget_stops_between_the_layers_of_a_prompts_chunk(lm, monkeypatch):
    """The soak: a chunk of a long prompt took 2 s here and far longer beside a busy server, and crowd calls held the
    model 14-60 s past turns of 2-3 s. The check runs before each layer of a prefill's forward as well, its first
    chunk's too, when the prompt takes more than one chunk (the only chunk of a short prompt every call reads whole);
    a call stopped inside a chunk leaves nothing behind, and the same prompt read later gives the same tokens."""
    from specviz.engine import session as session_module
    from specviz.lab.lab import Lab
    from test_app import PROMPT

    monkeypatch.setattr(session_module, "PREFILL_CHUNK", 8)  # the prompt in several chunks
    layers = lm.model.model.layers
    ran = []
    hooks = [layer.register_forward_pre_hook(lambda module, args, k=k: ran.append(k)) for k, layer in
             enumerate(layers)]
    asked = []
    try:
        lab = Lab()
        lab.choose_values("", PROMPT, "pld", 8, {})
        contended = CallBudget(time.monotonic() + 120, seconds=120, started=time.monotonic() - 30, contended_s=10,
                               others_waiting=lambda: asked.append(1) or len(asked) > 5)
        with pytest.raises(SpecvizError, match="it was still reading the prompt, and your run is as it was"):
            lab.step(8, budget=contended)
        # stopped inside the first chunk's forward: 5 layers ran, the sixth's check stopped it (this test's hook on
        # the sixth is called before the check's)
        assert lab.session is None and len(ran) == 6
        lab.step(8)
        ran.clear()
        monkeypatch.setattr(session_module, "PREFILL_CHUNK", 4096)  # now the prompt is one chunk: read whole
        short = Lab()
        short.choose_values("", PROMPT, "pld", 8, {})
        asked.clear()
        stopped = CallBudget(time.monotonic() + 120, seconds=120, started=time.monotonic() - 30, contended_s=10,
                             others_waiting=lambda: 1)
        short.step(8, budget=stopped)  # the prompt read and the call's first step made, however many wait
        assert len(ran) >= len(layers) and short.session.output_ids
    finally:
        for hook in hooks:
            hook.remove()
    alone = Lab()
    alone.choose_values("", PROMPT, "pld", 8, {})
    alone.step(8)
    assert lab.session.output_ids == alone.session.output_ids


class HeldSession:
    """What LiveSessions reads of a Lab (a byte is a token here)."""

    def __init__(self, address: str, tokens: int = 100, spare: int = 0):
        self.visitor_address, self.held_bytes, self.holds_state = address, tokens + spare, True
        self.spare, self.streaming = spare, False
        self.stepping, self.released = threading.Lock(), None

    def trim_at_rest(self) -> bool:
        self.held_bytes, self.spare = self.held_bytes - self.spare, 0
        return True

    def release_with(self, message: str) -> None:
        self.holds_state, self.released = False, message


def test_a_visitor_over_their_share_lets_their_own_sessions_go():
    live = LiveSessions(limit=12, byte_limit=10_000)
    live.visitor_limit, live.visitor_byte_limit = 3, 4_000
    honest = HeldSession("honest")
    live.touch(honest)
    greedy = [HeldSession("greedy") for _ in range(6)]
    for held in greedy:
        live.touch(held)
    assert honest.released is None
    assert sum(h.holds_state for h in greedy) == 3 and "per visitor" in greedy[0].released
    big = HeldSession("greedy", tokens=3_950)
    live.touch(big)
    assert honest.released is None and sum(h.holds_state for h in greedy) == 0
    side_a, side_b = HeldSession("ab", tokens=2_500), HeldSession("ab", tokens=1_400)
    live.touch(side_a, side_b)  # both sides of one A/B call: neither lets the other go
    assert side_a.released is None and side_b.released is None


def test_idle_sessions_are_trimmed_before_any_is_released():
    """Issue 73: what an idle session holds only for a running forward (spare room, transposed keys) goes first;
    a session is released only while the trimmed ones are still over the limit, and a Run between its frames
    keeps its copies."""
    live = LiveSessions(limit=12, byte_limit=1_000)
    resting = HeldSession("a", tokens=400, spare=300)
    running = HeldSession("b", tokens=100, spare=50)
    running.streaming = True
    live.touch(resting)
    live.touch(running)
    newcomer = HeldSession("c", tokens=400)
    live.touch(newcomer)  # 700 + 150 + 400 over 1,000: trimming the resting one (-300) makes room
    assert resting.released is None and resting.held_bytes == 400 and running.held_bytes == 150
    live.touch(HeldSession("d", tokens=300))  # 400 + 150 + 400 + 300: the oldest idle one goes
    assert resting.released is not None and running.released is None


def held_state(entries: int):
    """A LabState whose run holds a cache of `entries` entries (a stand-in: no model; one layer, 1 KB an entry
    for keys and for values, in runtime.kv's own growing buffer)."""
    from types import SimpleNamespace

    import torch

    from specviz.lab.lab_state import LabState
    from specviz.runtime.kv import GrowingLayer

    layer = GrowingLayer()
    layer.update(torch.zeros(1, 1, entries, 256), torch.zeros(1, 1, entries, 256))
    cache = SimpleNamespace(layers=[layer], get_seq_length=lambda: layer.length)
    return LabState(session=SimpleNamespace(context=[0] * entries, cache=cache))


def test_a_session_is_counted_in_the_bytes_its_cache_takes():
    """Issue 73, item 3: a session's share is what its buffers take, spare room included (runtime.kv grows a
    buffer by an eighth, at least 256 entries), and trimmed at rest it takes its entries' bytes alone."""
    from specviz.lab.lab import Lab

    lab = Lab(state=held_state(600))
    assert lab.held_bytes == 2 * 1024 * 864  # keys and values, 600 entries and their spare 256, to a multiple of 16
    assert lab.trim_at_rest() and lab.held_bytes == 2 * 1024 * 600


def test_the_live_limits_count_a_new_session_once_its_prompt_is_read(monkeypatch):
    """Issue 73, the soak (item 7): the live-session limits counted a session when its call began, before its
    prefill, at what it held then (nothing, for a new one), and let the others go only at the next visitor's
    call: a Run on the soak's 6,036-token prompt (about 850 MB with its paired ar and the head's features, measured)
    stayed beside the sessions it should have replaced until someone else called. Once a call's first reply is in,
    the others over the limits go."""
    from specviz.lab import lab as lab_module, model_calls
    from specviz.lab.lab import Lab
    from specviz.lab.lab_state import CarriedStates, ModelReply

    one = Lab(state=held_state(600)).held_bytes
    live = LiveSessions(limit=12, byte_limit=one + one // 2)
    monkeypatch.setattr(lab_module, "LIVE", live)
    idle = Lab(state=held_state(600), visitor_address="192.0.2.1")
    live.touch(idle)
    newcomer = Lab(visitor_address="192.0.2.2")
    newcomer.wanted = object()  # the runner below reads no settings
    model_calls.run_calls_with(lambda call, carried: iter([ModelReply(CarriedStates([held_state(600)]), ("",))]))
    try:
        newcomer.step(16)  # nothing held when the call began (nothing released then), 600 entries once it is read
    finally:
        model_calls.run_calls_with(None)
    assert len(newcomer.session.context) == 600
    assert not idle.holds_state and "released to make room" in idle.message
    assert live.held_bytes() == one


def test_the_door_bounds_what_one_visitor_has_in_the_queue():
    share = FairShare(ShareLimits(events_waiting=2, address_events_waiting=3))

    def admits(session, address, pending, **queue):
        admitted = share.admit(session, address, pending, **queue)
        if isinstance(admitted, str):
            return admitted
        share.joined(admitted)  # Gradio answered the join: its pending map holds the event from now on
        return None

    assert admits("s1", "a1", {"s1": {"e1"}}) is None
    assert "This session already has 2" in admits("s1", "a1", {"s1": {"e1", "e2"}})
    assert admits("s2", "a1", {}) is None
    pending = {"s1": {"e1"}, "s2": {"e2"}, "s3": {"e3"}}
    assert "Your address already has 3" in admits("s3", "a1", pending)
    assert admits("s9", "a2", pending) is None
    assert not isinstance(FairShare(None).admit("s1", "a1", {"s1": set(range(100))}), str)


def test_a_burst_of_joins_is_held_to_the_same_limits_as_joins_one_by_one():
    """Issue 73: the door read Gradio's pending map, which holds an event only several awaits after the door let it
    in, so 64 joins at once from one address all got in. Admissions in flight count from the moment they are let
    in, until the join is answered."""
    share = FairShare(ShareLimits(events_waiting=8, address_events_waiting=16))
    admitted = [share.admit(f"s{n % 8}", "burst", {}) for n in range(64)]  # none of them in Gradio's map yet
    assert sum(not isinstance(a, str) for a in admitted) == 16
    assert all("Your address already has 16" in a for a in admitted if isinstance(a, str))
    for admission in admitted:
        if not isinstance(admission, str):
            share.joined(admission)
    assert not isinstance(share.admit("s0", "burst", {}), str)  # answered and gone from the queue: room again


def test_the_last_places_of_the_queue_go_to_visitors_with_few_events_there():
    share = FairShare(ShareLimits(address_events_waiting=16, crowded_queue=0.75, crowded_events=2))
    pending = {f"g{n}": {f"e{n}"} for n in range(3)}
    for n in range(3):
        share.joined(share.admit(f"g{n}", "greedy", {}))
    refused = share.admit("g9", "greedy", pending, queued=48, max_queue=64)
    assert isinstance(refused, str) and "nearly full" in refused
    share.joined(share.admit("newcomer", "honest", pending, queued=48, max_queue=64))
    assert not isinstance(share.admit("g9", "greedy", pending, queued=47, max_queue=64), str)


def test_an_address_opens_a_bounded_number_of_sessions_in_a_window(monkeypatch):
    from specviz.lab import fair_share

    clock = [1_000.0]
    monkeypatch.setattr(fair_share.time, "monotonic", lambda: clock[0])
    share = FairShare(ShareLimits(new_sessions=3, new_sessions_window_s=600))
    for n in range(3):
        share.joined(share.admit(f"s{n}", "loads", {}))
    refused = share.admit("s3", "loads", {})
    assert isinstance(refused, str) and "opened 3 sessions" in refused and "10 minutes" in refused
    share.joined(share.admit("s1", "loads", {}))  # a session it has already opened goes on
    share.joined(share.admit("t0", "elsewhere", {}))
    clock[0] += 601
    assert not isinstance(share.admit("s3", "loads", {}), str)


def test_the_forwarded_address_counts_only_behind_a_trusted_proxy():
    from specviz.lab.visitor_address import TrustedProxies, visitor_key

    space = TrustedProxies.parse("10.0.0.0/8")
    # the Space's proxy (10.16.3.80) appended the client it saw; what the client wrote before is its own
    assert space.address("1.2.3.4, 198.51.100.7", "10.16.3.80") == "198.51.100.7"
    assert space.address("198.51.100.7, 10.1.1.1", "10.16.3.80") == "198.51.100.7"  # a chain of trusted proxies
    # a direct client chooses nothing with the header
    assert space.address("198.51.100.7", "203.0.113.9") == "203.0.113.9"
    assert TrustedProxies(()).address("198.51.100.7", "127.0.0.1") == "127.0.0.1"
    assert space.address("not an address", "10.16.3.80") == "10.16.3.80"
    # one machine's IPv6 addresses are one visitor
    assert visitor_key("2001:db8:1:2::5") == visitor_key("2001:db8:1:2:ffff::1") == "2001:db8:1:2::/64"
    assert visitor_key("::ffff:192.0.2.4") == "192.0.2.4"
    with pytest.raises(ValueError, match="SPECVIZ_TRUSTED_PROXIES"):
        TrustedProxies.parse("10.0.0.0/8, the proxy")


def test_a_long_call_stops_while_another_visitor_waits_for_the_model():
    waiting = [0]
    budget = CallBudget(time.monotonic() + 120, seconds=120, started=time.monotonic() - 30, contended_s=10,
                        others_waiting=lambda: waiting[0])
    budget.check()  # alone, a call runs to its full deadline
    waiting[0] = 1
    with pytest.raises(SpecvizError, match="after 30 s to let other visitors' calls run; what it generated is kept"):
        budget.check()
    fresh = CallBudget(time.monotonic() + 120, seconds=120, contended_s=10, others_waiting=lambda: 1)
    fresh.check()  # a call younger than its contended time goes on


def test_a_call_s_contenders_are_the_addresses_waiting_and_the_calls_at_the_models_other_places():
    """The soak (issue 73): a crowd's call at one model place held the one compute thread while an honest Step at
    the other waited for each of its replies. A call's contenders are the other addresses whose events wait and
    those whose calls run beside it, whatever each had of the model lately; never its own address."""
    share = FairShare(ShareLimits())
    share.model_waiting = lambda address: {"waiting", address} - {address}
    with share.model_call(Visitor("s1", "me"), 1) as mine:
        assert share.contenders("me") == {"waiting"} and mine.others_waiting() == 1
        with share.model_call(Visitor("s2", "beside"), 1):
            assert share.contenders("me") == {"waiting", "beside"} and mine.others_waiting() == 2
            assert share.contenders("beside") == {"waiting", "me"}
        assert share.contenders("me") == {"waiting"}


def test_a_call_s_turn_is_shorter_the_more_visitors_wait():
    """Issue 73, a crowd: with n visitors waiting (each who has had less of the model), a call's turn is the
    contended time over n, never under the shortest turn, so a newcomer behind a crowd of any size waits about one
    contended time over the model's places."""
    def budget(ran: float, waiting: int) -> CallBudget:
        return CallBudget(time.monotonic() + 120, seconds=120, started=time.monotonic() - ran, contended_s=15,
                          shortest_s=1.0, others_waiting=lambda: waiting)

    budget(6, 2).check()      # 15 s over 2 waiting: 7.5 s
    with pytest.raises(SpecvizError, match="to let other visitors' calls run"):
        budget(8, 2).check()
    with pytest.raises(SpecvizError, match="to let other visitors' calls run"):
        budget(1.5, 20).check()  # 15 s over 20 is under the shortest turn: 1 s
    budget(0.9, 20).check()


def test_downloads_are_bounded_across_sessions_and_go_when_a_session_expires(tmp_path):
    kept = visitors.TOTAL_FILES_BYTES[0]
    visitors.TOTAL_FILES_BYTES[0] = 3_000
    try:
        folders = [visitors.files_folder(f"disk-{n}") for n in range(3)]
        for n, folder in enumerate(folders):
            (folder / "file.bin").write_bytes(b"x" * 1_400)
            os.utime(folder / "file.bin", (n + 1, n + 1))
            visitors.keep_within(folder, 64 * 2**20)
        assert not (folders[0] / "file.bin").exists() and (folders[2] / "file.bin").exists()
    finally:
        visitors.TOTAL_FILES_BYTES[0] = kept

    class Holder:
        released = 0

        def release(self):
            self.released += 1

    holder, in_use = Holder(), Holder()
    visitors.register("expiring", holder, in_use)
    folder = visitors.files_folder("expiring")
    # one state expires (its time to live counts from its last change): the session's other state stays
    assert visitors.release_holder(holder) == 1 and holder.released == 1 and in_use.released == 0
    assert folder.exists()
    assert visitors.release_holder(in_use) == 1 and not folder.exists()  # nothing of the session is left


# ---- every event of the page, called as an attacker would -------------------------------------------------------
@pytest.fixture(scope="module")
def server(public_server):
    return public_server[1].rstrip("/")


def post(url: str, path: str, body: dict, address: str = "192.0.2.7") -> tuple[int, dict]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "X-Forwarded-For": address})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def completed(url: str, session: str, event_id: str, seconds: float = 60) -> dict:
    """The queue's last message for event_id (its SSE stream), within seconds."""
    deadline = time.monotonic() + seconds
    with urllib.request.urlopen(f"{url}/gradio_api/queue/data?session_hash={session}", timeout=seconds) as stream:
        for raw in stream:
            line = raw.decode().strip()
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("event_id") == event_id and message.get("msg") == "process_completed":
                    return message
            assert time.monotonic() < deadline, f"no answer to {event_id} within {seconds} s"
    raise AssertionError("the stream closed before the answer")


def test_every_event_by_name_and_by_index_with_hostile_values(server):
    config = json.loads(urllib.request.urlopen(server + "/config", timeout=30).read())
    events = config["dependencies"]
    assert len(events) > 30  # the page registers every panel's events
    hostile = ["²", "9" * 5_000, None, [[]], {"a": 1}, 1e308, -1]
    private = [e for e in events if e.get("api_visibility") == "private" and e.get("backend_fn")]
    assert any(e["api_name"] == "load_model" for e in private) and private
    for event in private:  # not callable by name at all
        status, answer = post(server, f"/gradio_api/call/{event['api_name']}", {"data": []})
        assert status == 404 and "not of the API" in answer["detail"], event["api_name"]
    for n, event in enumerate(e for e in events if e.get("backend_fn")):
        session = f"fuzz-{n}"
        data = [hostile[(n + k) % len(hostile)] for k in range(len(event["inputs"]))]
        started = time.monotonic()
        status, answer = post(server, "/gradio_api/queue/join",
                              {"data": data, "fn_index": event["id"], "session_hash": session,
                               "event_data": None, "trigger_id": None}, address=f"192.0.2.{n % 200}")
        assert status in (200, 400, 422), (event["api_name"], status, answer)
        if status == 400:  # the door's refusal (a file never uploaded, event data that is not an object)
            assert isinstance(answer["detail"], str) and "\n" not in answer["detail"], (event["api_name"], answer)
        if status == 200:
            done = completed(server, session, answer["event_id"])
            if not done.get("success"):  # Gradio's own refusal of a value (it quotes it): a sentence, no trace
                text = str((done.get("output") or {}).get("error") or "")
                bound = 2_000 + len(json.dumps(data))
                assert "Traceback" not in text and "\n" not in text.strip() and len(text) < bound, \
                    (event["api_name"], text[:600])
        assert time.monotonic() - started < 60, event["api_name"]
    # a session hash is short and plain; a call by name without one is counted all the same
    status, answer = post(server, "/gradio_api/queue/join", {"data": [], "fn_index": 0, "session_hash": "x" * 65})
    assert status == 400 and "session hash" in answer["detail"]
    # the server is still there for an honest visitor
    status, answer = post(server, "/gradio_api/call/counters", {"data": []})
    assert status == 200 and answer.get("event_id")


def test_a_calls_first_step_is_never_cut_but_its_visitor_leaving_stops_it():
    """Under a crowd a visitor's Run was cut before its first step (its turn was over while it read its prompt):
    the checkpoint before a call's first step stops it only when its visitor left; the next ones at its turn's end
    and its deadline."""
    budget = CallBudget(time.monotonic() + 120, seconds=120, started=time.monotonic() - 30, contended_s=10,
                        others_waiting=lambda: 5)
    budget.check_at(reading_prompt=False)  # the first step goes
    with pytest.raises(SpecvizError, match="to let other visitors' calls run"):
        budget.check_at(reading_prompt=False)  # the second yields
    late = CallBudget(time.monotonic() - 1, seconds=120, started=time.monotonic() - 121)
    late.check_at(reading_prompt=False)
    with pytest.raises(SpecvizError, match="limit of 120 s per call"):
        late.check_at(reading_prompt=False)
    left = CallBudget(time.monotonic() + 120, seconds=120)
    left.cancelled.set()
    with pytest.raises(SpecvizError, match="visitor left"):
        left.check_at(reading_prompt=False)


def test_the_paired_ar_catches_up_whole_even_when_the_call_must_stop(lm):
    """A Run stopped for others' sake between its step and ar's catching up left the two one-sided (the counters
    compared unequal runs): ar's steps run with the checkpoints held off, and the call stops before the run's
    next step."""
    from specviz.engine.checkpoints import stopping_with
    from specviz.engine.paired_baseline import PairedBaseline
    from specviz.engine.session import Session

    run = Session(lm, "pld").start("Count from one to ten in words: one, two, three, four, five, six, seven.")
    run.step(32)
    paired = PairedBaseline(run)
    stops = []

    def stop_now(reading_prompt: bool) -> None:
        stops.append(reading_prompt)
        raise SpecvizError("stop")

    with stopping_with(stop_now):
        paired.keep_up()  # ar steps to the run's length: no checkpoint fires
        assert len(paired.ar.output_ids) >= len(run.output_ids) and not stops
        with pytest.raises(SpecvizError, match="stop"):
            run.step(32)  # the run's own next step is where a call stops
    assert paired.result().output_ids == run.output_ids
