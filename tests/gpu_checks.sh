#!/usr/bin/env bash
# Issue 45's CUDA checks (captured verify forwards), never in CI: two device calls that follow each other while
# the machine is warm (the default model's GGUF travels in two halves, as in tests/gpu_head_checks.sh).
#   PART=1  carries .whl, .gpu/a, .gpu/twin: the verify forward captured against eager by tree size on the
#           default model's random-weight twin (fp32 and bf16: timings depend on shapes only), the logits'
#           agreement, and every method greedy and sampled with graphs on and off on the twin.
#   PART=3  carries .whl and .gpu/twin alone (one short call): where a captured forward's time goes, by op
#           variant (tests/gpu_graph_profile.py), fp32 and bf16.
#   PART=2  carries .gpu/b: the real default model and its trained head; `bench --graphs both` on the held-out
#           suite and the tuning suite (fp32 greedy, lossless column), `dev overhead --graphs both` (the step's
#           breakdown), bf16 with graphs on (its differences classified by the bench's verdict column), and what
#           a carried state costs with its caches rebuilt on the device (`dev state-cost`, issue 43).
# Device time: PART=1 at most 150 s of commands, PART=2 at most 300 s (BUDGET_S changes either; a command the time does
# not reach is skipped with a line in the log, the most wanted run first), plus the wheels' install and the machine's
# start: within 8 minutes for the two. Prepare here: bash tests/gpu_head_prepare.sh. DEV=cpu SHORT=1 runs it here as a
# dry run (graphs=static).
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/gpu_setup.sh
if [ "$DEV" = cuda ]; then GRAPHS=on; BOTH=both; else GRAPHS=static; BOTH=static; fi
TOKENS=${TOKENS:-64}; REPEATS=${REPEATS:-1}; SIZES=1,2,4,8,16,32,64,128; TIMED=20
[ "${SHORT:-0}" = 1 ] && { TOKENS=12; REPEATS=1; SIZES=1,16; TIMED=2; }

if [ "$PART" = 1 ]; then
  deadline=$((SECONDS + ${BUDGET_S:-150}))
  twin_model
  for mode in fp32 bf16; do
    run_until $deadline $PY tests/gpu_graph_timings.py --model $MODEL --device $DEV --mode $mode --graphs $GRAPHS \
      --sizes $SIZES --repeats $TIMED --json "$OUT/timings-$mode.json"
  done
  run_until $deadline $PY tests/gpu_random_head.py --model $MODEL --out /tmp/twin-heads
  twin_smoke
  run_until $deadline $PY -m specviz $smoke --mode fp32 --graphs $BOTH --methods $methods --json "$OUT/twin-fp32.json"
  run_until $deadline $PY -m specviz $smoke --mode fp32 --graphs $GRAPHS --methods $methods --temperature 0.8 --seed 11
  log "part 1 done"
  exit 0
fi

if [ "$PART" = 3 ]; then
  MODEL=/tmp/twin; rm -rf $MODEL; cp -r .gpu/twin $MODEL
  run $PY -m specviz dev random-model --out $MODEL --weights --seed 0 >/dev/null || exit 1
  for mode in fp32 bf16; do
    run timeout ${BUDGET_S:-60} $PY tests/gpu_graph_profile.py --model $MODEL --device $DEV --mode $mode
  done
  exit 0
fi

# PART=2: the default model and its trained head, rebuilt from the two compressed parts
deadline=$((SECONDS + ${BUDGET_S:-300}))
default_model
common="--device $DEV --draft-model head"
bench="bench $common --methods ar,racer,respec,reader,unified --max-new-tokens $TOKENS --skip-category long-context"
run_until $deadline $PY -m specviz $bench --mode fp32 --graphs $BOTH --repeats $REPEATS --suite assets/heldout.jsonl \
  --json "$OUT/bench-heldout.json"
run_until $deadline $PY -m specviz dev overhead $common --mode fp32 --graphs $BOTH --suite assets/heldout.jsonl \
  --method unified --budgets auto,64 --max-new-tokens 32
for method in racer respec reader; do  # each method's own work at its default against the captured forward
  run_until $deadline $PY -m specviz dev overhead $common --mode fp32 --graphs $GRAPHS --suite assets/heldout.jsonl \
    --method $method --budgets auto --max-new-tokens 32
done
run_until $deadline $PY -m specviz $bench --mode fp32 --graphs $BOTH --repeats 1 --suite assets/suite.jsonl \
  --json "$OUT/bench-suite.json"
run_until $deadline $PY -m specviz $bench --mode bf16 --graphs $GRAPHS --repeats 1 --suite assets/heldout.jsonl \
  --json "$OUT/bench-heldout-bf16.json"
# issue 43: a carried state's KV caches rebuilt from their tokens on the device (the prefill a ZeroGPU call pays)
run_until $deadline $PY -m specviz dev state-cost --contexts 500,4000 --repeats 3
log "part 2 done"
