"""`generate`: one prompt with one method; the text (or one JSON object) on stdout, the figures on stderr."""

from __future__ import annotations

import json
import sys

from specviz.commands.common_args import draft_model, load_target, model_args, positive, sampling, sampling_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("generate", help="generate from one prompt with one method")
    parser.add_argument("--method", required=True)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt")
    source.add_argument("--prompt-file")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--budget", default="auto", help="draft nodes per step, or auto")
    sampling_args(parser)
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--trace", default=None, help="write the step-by-step trace as JSON here")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    model_args(parser)
    parser.set_defaults(func=run)


def checked_request(args, prompt):
    """The run's settings through the page's door (lab.visitor_request, a private policy): the method, its
    parameters, budget, sampling and prompt are refused as the page refuses them, before any model loads."""
    from specviz.lab.visitor_request import VisitorRequest
    from specviz.params import parse_assignments

    params = parse_assignments(args.param)
    if isinstance(prompt, list):  # a chat file: the page's text form of a chat
        prompt = json.dumps({"messages": prompt}, ensure_ascii=False)
    return VisitorRequest.of_loose({"model": args.model or "", "prompt": prompt, "method": args.method,
                                    "budget": args.budget, "params": params,
                                    "draft_model": args.draft_model or "", "mode": args.mode or "",
                                    "temperature": args.temperature, "top_p": args.top_p, "seed": args.seed},
                                   max_new_tokens=args.max_new_tokens, own_only=True)  # a command line names its own


def generated(args) -> dict:
    """The run's output and figures (`generate --json` prints exactly this)."""
    from specviz.studies.peers import PEER_METHODS, peer_run
    from specviz.engine.run import run_method
    from specviz.params import parse_assignments
    from specviz.runtime.prompts import read_prompt_file

    positive("--max-new-tokens", args.max_new_tokens)
    prompt = read_prompt_file(args.prompt_file) if args.prompt_file else args.prompt
    if args.method in PEER_METHODS:  # transformers' own generate(): none of the page's settings apply
        lm = load_target(args)
        outcome = peer_run(lm, args.method, prompt, params=parse_assignments(args.param), sampling=sampling(args),
                           max_new_tokens=args.max_new_tokens, draft=draft_model(args, [args.method], lm))
    else:
        request = checked_request(args, prompt)
        s = request.settings
        lm = load_target(args)
        outcome = run_method(lm, s.run, s.model_prompt, max_new_tokens=request.max_new_tokens,
                             draft=draft_model(args, [s.method], lm), trace=bool(args.trace))
    if outcome.trace is not None:  # a peer's run has none
        outcome.trace.save(args.trace)
    return {"method": args.method, "output_ids": outcome.output_ids, "text": outcome.text, **outcome.figures().to_dict()}


def run(args) -> dict:
    result = generated(args)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(result["text"])
        print(f"\n[{result['new_tokens']} tokens in {result['steps']} steps, "
              f"{result['mean_accepted']:.2f} per step, {result['tokens_per_s']:.1f} tok/s]", file=sys.stderr)
    return result
