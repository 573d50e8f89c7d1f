"""`python -m specviz`: the command line (specviz/cli.py)."""

import sys

from specviz.cli import main

sys.exit(main())
