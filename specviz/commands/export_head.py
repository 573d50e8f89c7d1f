"""`export-head`: an EAGLE-3 head written for a serving engine (engine_configs.speculators_export)."""

from __future__ import annotations

from specviz.commands.common_args import load_target, model_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("export-head", help="write an EAGLE-3 head for a serving engine: the speculators "
                                   "format (`vllm serve DIR`) or EAGLE-3's own layout (SGLang, TensorRT-LLM)")
    parser.add_argument("--format", default="speculators", choices=("speculators", "eagle3"),
                        help="speculators: the speculators package's eagle3 format, which vLLM serves by itself; "
                        "eagle3: EAGLE-3's layout (midlayer.*), which SGLang and TensorRT-LLM load")
    parser.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder")
    parser.add_argument("--speculative-tokens", type=int, default=3,
                        help="the greedy proposal's length the speculators config names (vLLM's "
                        "num_speculative_tokens; `static-tree --format vllm` recommends one)")
    parser.add_argument("--weights-dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="the exported weights' dtype (the head is trained in float32; the one the repository "
                        "ships is float16)")
    parser.add_argument("--verifier", default=None, help="the target's name for the engine (default: its hub id)")
    model_args(parser)   # --draft-model: head-eagle3 (the default; trained here, else shipped) or eagle:PATH
    parser.set_defaults(func=run)


def run(args) -> dict:
    from pathlib import Path

    from specviz.errors import SpecvizError
    from specviz.runtime.eagle_files import eagle_folder, parse_eagle_spec
    from specviz.runtime.draft_head import MissingHead
    from specviz.runtime.eagle_head import EagleHead
    from specviz.runtime.feature_tap import eagle3_tap
    from specviz.runtime.draft_model_spec import resolve_draft
    from specviz.runtime.loading import DEFAULT_MODEL, HUB_TWIN_OF_DEFAULT
    from specviz.runtime.trained_eagle3 import EAGLE3_SPEC, eagle3_location
    from specviz.engine_configs.speculators_export import Verifier, export_head

    spec = (args.draft_model or EAGLE3_SPEC).strip()
    location = parse_eagle_spec(spec)
    if spec != EAGLE3_SPEC and location is None:
        raise SpecvizError(f"Only EAGLE-3 heads export: name {EAGLE3_SPEC} or eagle:PATH, not {spec!r}.")
    lm = load_target(args)
    head = resolve_draft(lm, spec, None)   # the head checked against this target, as drafting checks it
    if isinstance(head, MissingHead):
        raise SpecvizError(f"{spec} cannot be exported for {lm.name}: {head.reason}")
    if not isinstance(head, EagleHead) or len(head.feature_tap.layers) != 3:
        raise SpecvizError(f"{spec} is not an EAGLE-3 head (it reads {head.feature_tap.layers or 'the final norm'}): "
                           "only EAGLE-3 heads export.")
    source = eagle3_location(lm) if location is None else eagle_folder(location)  # trained here, else shipped
    config = lm.model.config
    name = args.verifier or (HUB_TWIN_OF_DEFAULT if lm.name == DEFAULT_MODEL or not args.model else lm.name)
    verifier = Verifier(name, tuple(getattr(config, "architectures", None) or ["LlamaForCausalLM"]),
                        head.feature_tap.layers, eagle3_tap(int(config.num_hidden_layers)).layers)
    written = export_head(Path(source), Path(args.out), args.format, verifier, args.speculative_tokens,
                          args.weights_dtype, lm.model.get_input_embeddings().weight,
                          lm.model.get_output_embeddings().weight)
    serve = {"speculators": f"vllm serve {args.out}",
             "eagle3": f"python -m sglang.launch_server --model-path {name} --speculative-algorithm EAGLE3 "
                       f"--speculative-draft-model-path {args.out}"}[args.format]
    print(f"{spec} for {lm.name} written in the {args.format} format: "
          + ", ".join(str(p) for p in written) + f"\n  serve it: {serve}")
    return {"format": args.format, "files": [str(p) for p in written], "verifier": name}
