"""The command line's commands, one module each: `register(subparsers)` adds the command's parser (its `func` is
the module's `run(args)`), `run` is the command's glue between the flags and the library. COMMANDS are the ones
users run, in the order `--help` lists them; the maintenance commands behind the docs' figures are under
`dev` (specviz/commands/dev/). common_args.py holds what several commands share."""

from specviz.commands import (bench, calibrate, datastore, draft_quality, export_head, generate, params,
                              space_bundle, static_tree, sweep, train_head, trained_files)

COMMANDS = (generate, bench, sweep, calibrate, datastore, train_head, export_head, trained_files, draft_quality,
            static_tree, space_bundle, params)
