"""What several commands share: the model's and sampling's flags, the checks of whole numbers, loading the
target and the draft model the flags name, and printing a report (with its JSON copy where asked)."""

from __future__ import annotations

import argparse
import json
import sys

from specviz.errors import SpecvizError


def model_args(parser: argparse.ArgumentParser, graphs_both: bool = False) -> None:
    """The model's flags; graphs_both: --graphs may also be `both` (the command runs each regime in turn)."""
    parser.add_argument("--model", default=None, help="hub id or local folder (default: packaged "
                        "SmolLM2-135M-Instruct)")
    parser.add_argument("--draft-model", default=None, help="draft model of the model source (respec, reader, unified, "
                        "rapid) and of hf-assisted: head (the trained draft head, `train-head`), head-eagle3 (the "
                        "EAGLE-3-shaped head, `train-head --shape eagle3`), self (the target's "
                        "own weights), self-skip:K, eagle:PATH (a published EAGLE-1/2 or EAGLE-3 head: folder or hub "
                        "id), or a model id / folder of the target's vocabulary (default: the "
                        "head when one is trained for the target, else self)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when present)")
    parser.add_argument("--dtype", default=None, help="float32, float16, bfloat16 (default: fp32 on CPU)")
    parser.add_argument("--mode", default=None, help="run mode: a precision (fp32, bf16, fp16) and/or compile, "
                        "joined by '+', e.g. bf16+compile (default: fp32 eager on CPU; SPECVIZ_MODE sets it)")
    parser.add_argument("--linear", default=None, help="linear-layer kernel: native (default on CPU in fp32), onednn "
                        "(default in bf16) or stock (PyTorch's F.linear); SPECVIZ_LINEAR sets the default")
    regimes = ("auto", "on", "off", "static") + (("both",) if graphs_both else ())
    parser.add_argument("--graphs", default=None, choices=regimes,
                        help="verify forwards as CUDA graphs over a static KV cache: on, off, auto (on with CUDA; "
                        "SPECVIZ_GRAPHS sets it), static (the static cache uncaptured: the CPU's stand-in)"
                        + ("; both: each regime in turn, in one process" if graphs_both else ""))


def sampling_args(parser: argparse.ArgumentParser) -> None:
    """Temperature (0: greedy), top-p and seed; checked by SamplingSettings.checked (values stay text here
    so that a bad one gets its own message)."""
    parser.add_argument("--temperature", default="0", help="0 = greedy; > 0 samples (lossless speculative sampling)")
    parser.add_argument("--top-p", default="1", help="nucleus sampling mass in (0, 1]")
    parser.add_argument("--seed", default="0", help="whole number; the same seed repeats a sampled run")


def sampling(args):
    """The checked SamplingSettings of sampling_args' flags."""
    from specviz.accept.sampling import SamplingSettings

    return SamplingSettings.checked(args.temperature, args.top_p, args.seed)


def positive(name: str, value: int, high: int = 100_000) -> int:
    """value itself when it lies in 1..high, else a refusal naming the flag."""
    if not 1 <= value <= high:
        raise SpecvizError(f"{name} must be between 1 and {high}, got {value}.")
    return value


def tree_sizes(text: str, high: int = 1024) -> list[int]:
    """--sizes: comma-separated tree sizes in tokens, each 1..high; a SpecvizError that says why otherwise."""
    try:
        sizes = [positive("--sizes", int(x), high) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecvizError(f"--sizes takes whole numbers separated by commas, got {text!r}.") from None
    if not sizes:
        raise SpecvizError("--sizes names no size.")
    return sizes


def whole(name: str, text: str) -> int:
    """A flag's text read as a whole number, else a refusal naming the flag."""
    try:
        return int(text.strip())
    except ValueError:
        raise SpecvizError(f"{name} must be a whole number, got {text!r}.") from None


def load_target(args):
    """The target model the command runs on; a kernel asked for that cannot run here is said on stderr."""
    from specviz.runtime.loading import load_model

    graphs = getattr(args, "graphs", None)
    lm = load_model(args.model, args.device, args.dtype, args.linear, args.mode,
                    "on" if graphs == "both" else graphs)
    for note in lm.notes:
        print(f"note: {note}", file=sys.stderr)
    return lm


def load_model(args, name: str | None):
    """A model loaded with the command's device, dtype, linear kernel and mode."""
    from specviz.runtime.loading import load_model as load

    return load(name, args.device, args.dtype, args.linear, args.mode)


def draft_model(args, methods: list[str], lm):
    """The draft model --draft-model names (runtime.draft_model_spec.resolve_draft), loaded as the target was;
    hf-assisted needs a model of its own: the default model when none is named."""
    from specviz.runtime.draft_head import HEAD_SPEC, MissingHead
    from specviz.runtime.eagle_files import parse_eagle_spec
    from specviz.runtime.layer_skip import parse_self_skip
    from specviz.runtime.shared_resources import model_key
    from specviz.runtime.draft_model_spec import SELF_DRAFT, resolve_draft
    from specviz.runtime.trained_eagle3 import EAGLE3_SPEC

    spec = (args.draft_model or "").strip()
    if "hf-assisted" in methods:
        if spec in (SELF_DRAFT, HEAD_SPEC, EAGLE3_SPEC) or parse_self_skip(spec) is not None \
                or parse_eagle_spec(spec) is not None:
            raise SpecvizError("hf-assisted needs a draft model of its own, not self, self-skip or a head.")
        spec = spec or model_key(None)
    draft = resolve_draft(lm, spec, lambda name: load_model(args, name))
    if isinstance(draft, MissingHead):
        print(f"note: the copy-logit tree drafts in the head's place: {draft.reason}", file=sys.stderr)
    return draft


def graph_regimes(args, lm) -> list[str] | None:
    """--graphs both: the regimes a command runs in turn (None: the one the model was loaded with)."""
    if getattr(args, "graphs", None) != "both":
        return None
    if not lm.graphs:
        raise SpecvizError("--graphs both compares CUDA graphs with the eager forward: it needs a CUDA device "
                           f"and the lean forward ({'; '.join(lm.notes) or 'this model has neither'}).")
    return ["on", "off"]


def emit(table: str, report: dict, json_path: str | None) -> dict:
    """Print a report's table; write the full report as JSON where asked."""
    print(table)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=1)
    return report


def log_line(line: str) -> None:
    """Progress for stderr, flushed at once (stdout keeps the report)."""
    print(line, file=sys.stderr, flush=True)
