"""`datastore`: READER's long-term datastore: build it, measure it, or regenerate its corpus."""

from __future__ import annotations

import json

from specviz.commands.common_args import load_target, log_line, model_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("datastore", help="READER's long-term datastore: build it, or measure it")
    parser.add_argument("action", choices=("build", "info", "corpus"),
                        help="build: tokenise assets/datastore_corpus.jsonl into the cache; info: size, load time, "
                             "memory, lookup latency; corpus: regenerate the corpus text with the model (slow)")
    model_args(parser)
    parser.set_defaults(func=run)


def run(args) -> None:
    from specviz.index import datastore

    lm = load_target(args)
    if args.action == "build":
        print(json.dumps(datastore.build(lm)))
    elif args.action == "info":
        print(json.dumps(datastore.measure_datastore(lm)))
    else:
        from specviz.index.datastore_corpus import generate_corpus

        print(json.dumps(generate_corpus(lm, datastore.ASSETS / "datastore_prompts.jsonl", datastore.CORPUS,
                                         log=log_line)))
