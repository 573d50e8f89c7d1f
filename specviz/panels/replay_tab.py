"""The Replay tab: a shipped trace or an uploaded one replays with no model loaded; Step or Run returns to the
live run."""

from __future__ import annotations

import os
from pathlib import Path

import gradio as gr

from specviz.errors import SpecvizError, quoted
from specviz.lab.fair_share import SHARE, visitor_of
from specviz.lab.lab import Lab
from specviz.lab.resident_bytes import resident_bytes
from specviz.panels.lab_outputs import LabOutputs
from specviz.panels.page_context import PageContext
from specviz.panels.visitor_handler import visitor_handler
from specviz.records.trace import MAX_TRACE_BYTES, Trace


TRACE_READS = 2


def _refused(tab: "ReplayTab", lab: Lab, error) -> dict:
    return tab.out.failed(lab, error)


class ReplayTab:
    def __init__(self, context: PageContext):
        self.context, self.policy, self.traces = context, context.policy, context.traces
        with gr.Tab("Replay", id="tab-replay"):
            gr.Markdown("Recorded runs replay with **no model loaded**: pick a shipped trace or upload one "
                        f"(a specviz trace JSON, at most {MAX_TRACE_BYTES // 2**20} MB). Step or Run returns to "
                        "your live run.")
            with gr.Row():
                self.shipped = gr.Dropdown(list(self.traces), value=context.first_trace, elem_id="shipped-trace",
                                           label="Shipped traces (assets/traces)")
                self.replay_btn = gr.Button("Replay", elem_id="replay-btn")
            self.upload = gr.File(label="Upload a trace", file_types=[".json"], elem_id="upload-trace")

    def wire(self, out: LabOutputs) -> None:
        self.out = out
        self.replay_btn.click(self.on_replay_shipped, [out.lab, self.shipped], out.components, api_name="replay")
        # at most two uploads read at once: each holds its JSON and its records until it is checked
        self.upload.upload(self.on_upload, [out.lab, self.upload], out.components, api_name="upload_trace",
                           concurrency_id="trace-upload", concurrency_limit=TRACE_READS)

    @visitor_handler(_refused, session=Lab)
    def on_replay_shipped(self, request: gr.Request, lab, name) -> dict:
        if not isinstance(name, str) or name not in self.traces:
            raise SpecvizError(f"No shipped trace named {quoted(name)}; the shipped ones: {', '.join(self.traces)}.")
        lab.load_trace(self.traces[name], name, shipped=True)
        return self.out.shown(lab)

    @visitor_handler(_refused, session=Lab)
    def on_upload(self, request: gr.Request, lab, path) -> dict:
        if not path:
            return self.out.shown(lab)
        if not isinstance(path, str):
            raise SpecvizError("Upload a trace file (JSON).")
        try:
            size = os.path.getsize(path)
        except OSError:
            raise SpecvizError("That upload could not be read: upload the trace file again.") from None
        self.policy.check_upload(size)
        visitor = visitor_of(request)
        SHARE.check_replay(lab, visitor, size)  # a trace holds at least its file's bytes: the cheap refusal first
        try:
            trace = Trace.load(path)
        except OSError:
            raise SpecvizError("That upload could not be read: upload the trace file again.") from None
        # what the visitor holds is what the trace takes in this process (several times its file), not the file
        held = resident_bytes(trace) if SHARE.limits is not None else size
        SHARE.check_replay(lab, visitor, held)
        lab.replay_trace(trace, Path(path).name)
        SHARE.hold_replay(lab, lab.replay, visitor, held)
        return self.out.shown(lab)
