# Sourced by the device scripts (tests/gpu_checks.sh, tests/gpu_head_checks.sh) from the repository root: the
# wheels carried in .whl installed where the machine lacks them (a later part finds them installed), $PY and
# PYTHONPATH, and log / run / run_until writing to $OUT/log-$PART.txt. DEV=cpu runs here as a dry run.
OUT=${OUT:-/tmp/gpu-out}
DEV=${DEV:-cuda}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
if [ "$DEV" = cuda ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    2>/dev/null || [ -d /tmp/site/transformers ] || exit 1
  export PYTHONPATH=/tmp/site:$PWD
  PY=python3
else
  PY=${PY:-.venv/bin/python}
  export PYTHONPATH=$PWD
fi
start=$SECONDS
log() { echo "### [$((SECONDS - start)) s] $*" | tee -a "$OUT/log-$PART.txt"; }
run() { log "$*"; "$@" 2>&1 | tee -a "$OUT/log-$PART.txt"; }
# run_until DEADLINE CMD...: CMD with what is left of the call's time (so the last files still come back)
run_until() { local left=$(($1 - SECONDS)); shift; [ $left -gt 20 ] || { log "skipped (time): $*"; return; }
  run timeout $left "$@"; }
