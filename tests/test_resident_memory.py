"""Issue 73: what a visitor holds, counted as what it costs in the process. A trace's share is the bytes its records
take in memory (lab.resident_bytes: several times its file), Gradio's store of sessions is bounded and lets an
evicted session's objects go, a released session takes Gradio's entry of it along, and uploaded files are bounded on
disk per address and in all, and go with their session (lab.upload_ledger)."""

import json
import os
import time
import tracemalloc
from types import SimpleNamespace

import pytest

from specviz.errors import SpecvizError
from specviz.lab import visitors
from specviz.lab.fair_share import FairShare, ShareLimits, Visitor
from specviz.lab.resident_bytes import resident_bytes
from specviz.lab.upload_ledger import UploadLedger
from test_cost_fuzz import TraceShape, build_trace


def test_a_traces_share_is_what_its_records_take_in_memory(tmp_path):
    from specviz.records.trace import Trace

    shape = TraceShape(steps=120, nodes=8, committed=2, text_chars=20, sources=1, foreign_sources=False,
                       curve_points=0, curve_top=1, null_timing=False, param_items=1)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(build_trace(shape), separators=(",", ":")))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        trace = Trace.load(path)
        traced = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    counted = resident_bytes(trace)
    assert counted > 2 * path.stat().st_size  # the file's bytes undercount what the process holds
    assert 0.6 * traced < counted < 1.6 * traced, (counted, traced)


def test_the_replay_share_counts_resident_bytes():
    share = FairShare(ShareLimits(replay_bytes=40 * 2**20, process_replay_bytes=100 * 2**20))

    class Trace:
        pass

    class Shown:
        def __init__(self):
            self.replay = Trace()

        def drop_replay(self, message):
            self.replay = None

    labs = [Shown() for _ in range(3)]
    for n, lab in enumerate(labs):  # three visitors, each a 4 MB file that holds 30 MB
        share.check_replay(lab, Visitor(f"s{n}", f"a{n}"), 30 * 2**20)
        share.hold_replay(lab, lab.replay, Visitor(f"s{n}", f"a{n}"), 30 * 2**20)
    with pytest.raises(SpecvizError, match="as many uploaded traces as it can"):
        share.check_replay(Shown(), Visitor("s9", "a9"), 30 * 2**20)  # 120 MB held: past the process's 100


def test_gradios_session_store_is_bounded_and_lets_evicted_sessions_go():
    """Gradio keeps every session's state until 10,000 of them; with the store's capacity set, an evicted
    session's objects are released as a disconnect would release them, and a released session's entry goes."""
    from collections import OrderedDict

    from gradio.state_holder import StateHolder

    from specviz.panels.gradio_sessions import SessionStore

    holder = StateHolder()
    holder.capacity, holder.blocks = 3, SimpleNamespace(default_config=None)
    holder.session_data = OrderedDict()
    store = SessionStore(SimpleNamespace(server_app=SimpleNamespace(state_holder=holder)))
    store.ensure()

    class Held:
        released = 0

        def release(self):
            self.released += 1

    held = Held()
    visitors.register("evicted-first", held)
    for name in ("evicted-first", "b", "c", "d"):
        holder.session_data[name] = object()  # what StateHolder.__getitem__ adds, then update() trims
        holder.update(name)
    deadline = time.monotonic() + 5
    while not held.released and time.monotonic() < deadline:  # released on a thread of its own
        time.sleep(0.01)
    assert list(holder.session_data) == ["b", "c", "d"] and held.released == 1 and store.evicted == 1
    visitors.release("c")
    assert "c" not in holder.session_data


def test_a_new_sessions_state_copies_no_block_configs_until_an_update_needs_one():
    """Gradio copied every block's config for each new session hash, on the event loop (the soak's churn: 31 of
    70 s there); the store's new sessions copy a block's config only when an update of it needs one."""
    import gradio as gr
    from gradio.state_holder import StateHolder

    from specviz.panels.gradio_sessions import SessionStore

    with gr.Blocks() as blocks:
        box = gr.Textbox("first")
    holder = StateHolder()
    holder.set_blocks(blocks)
    SessionStore(SimpleNamespace(server_app=SimpleNamespace(state_holder=holder))).ensure()
    state = holder["a-new-session"]
    assert state.config_values == {} and state[box._id] is not None
    state._update_value_in_config(box._id, "changed")  # what Gradio does with an output's new value
    assert state.config_values[box._id]["props"]["value"] == "changed"
    assert holder["another-session"].config_values == {}  # nothing shared between sessions
    assert box._id in holder.session_data["a-new-session"].config_values


def test_uploads_are_bounded_on_disk_per_address_and_in_all(tmp_path, monkeypatch):
    from specviz.lab import upload_ledger

    def written(name: str, size: int) -> str:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "f.json").write_bytes(b"x" * size)
        return str(folder / "f.json")

    ledger = UploadLedger(address_bytes=250, total_bytes=500)
    first, second = written("a1", 100), written("a2", 100)
    assert ledger.record([first], "A") and ledger.record([second], "A")
    assert ledger.record([written("a3", 100)], "A")  # past the address's share: its own oldest goes
    assert not os.path.exists(first) and os.path.exists(second) and ledger.held_bytes("A") == 200
    assert not ledger.record([written("too-big", 300)], "B")  # never fits an address's share: refused, removed
    assert not (tmp_path / "too-big").exists()
    for n in range(3):
        assert ledger.record([written(f"b{n}", 100)], f"B{n}")
    assert ledger.claim(second, "session-1")
    assert ledger.held_bytes() == 500
    assert ledger.record([written("c", 100)], "C")  # past all: the oldest file no session uses goes first
    assert os.path.exists(second) and ledger.held_bytes() == 500
    assert not ledger.claim("/etc/passwd", "session-1")  # only what /upload wrote may be named
    assert ledger.release_session("session-1") == 1 and not os.path.exists(second)
    clock = [time.time() + upload_ledger.UNCLAIMED_S + 1]
    monkeypatch.setattr(upload_ledger.time, "time", lambda: clock[0])
    assert ledger.record([written("d", 10)], "D") and ledger.held_bytes() == 10  # unclaimed files expire
