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
  twin_model
  run $PY tests/gpu_random_head.py --model $MODEL --out /tmp/twin-heads || exit 1
  twin_smoke
  run $PY -m specviz $smoke --mode fp32 --methods $methods --json "$OUT/twin-fp32.json"
  run $PY -m specviz $smoke --mode fp32 --methods $methods --temperature 0.8 --seed 11 --json "$OUT/twin-fp32-t08.json"
  log "part 1 done"
  exit 0
fi

# PART=2: the default model and its trained head, rebuilt from the two compressed parts
deadline=$((SECONDS + ${BUDGET_S:-540}))
default_model
common="--device $DEV --mode fp32 --draft-model head"
bench="bench $common --methods ar,racer,respec,reader,unified --repeats $REPEATS --max-new-tokens $TOKENS"
bench="$bench --skip-category long-context"
run_until $deadline $PY -m specviz $bench --suite assets/heldout.jsonl --json "$OUT/bench-heldout-head.json"
run_until $deadline $PY -m specviz draft-quality $common --suite assets/heldout.jsonl --drafters head,self \
  --max-new-tokens 32 --json "$OUT/quality-heldout.json"
# last: what the time leaves (the log keeps each finished prompt's line if the limit cuts it)
run_until $deadline $PY -m specviz $bench --suite assets/suite.jsonl --json "$OUT/bench-suite-head.json"
log "part 2 done"
