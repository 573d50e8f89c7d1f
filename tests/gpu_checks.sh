#!/usr/bin/env bash
# The CUDA checks of the speed issue, in one run on a GPU machine (the device tool), never in CI.
# The default model's weights cannot travel there, so a random twin (its config and tokenizer, seeded
# weights) stands in: timings depend on shapes only and greedy exactness holds for any weights.
# Needs: .gpu/twin (python -m specviz random-model --out .gpu/twin) and, where that machine's
# transformers differs from requirements.txt, its wheel in .whl/. Writes everything under $OUT.
# GPU_MODES (default "fp32 bf16"), GPU_SUITES (default "suite heldout") and GPU_BENCH=0 (profile,
# cost curve and step overhead only) split the work into calls that fit the device tool's 10 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 1
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" | tee -a "$OUT/gpu.txt"
MODEL=/tmp/twin
cp -r .gpu/twin "$MODEL"
python3 -m specviz random-model --out "$MODEL" --weights --seed 0 || exit 1
run() { echo "### $*" | tee -a "$OUT/log.txt"; "$@" 2>&1 | tee -a "$OUT/log.txt"; }
for mode in ${GPU_MODES:-fp32 bf16}; do
  run python3 -m specviz profile --model "$MODEL" --mode "$mode" --sizes 1,16,64 --json "$OUT/profile-$mode.json"
  run python3 -m specviz calibrate --model "$MODEL" --mode "$mode"
  run python3 -m specviz overhead --model "$MODEL" --mode "$mode" --suite assets/suite.jsonl --method racer \
    --budgets 16,32,64 --max-new-tokens 32
  [ "${GPU_BENCH:-1}" = 1 ] || continue
  for suite in ${GPU_SUITES:-suite heldout}; do
    run python3 -m specviz bench --model "$MODEL" --mode "$mode" --suite "assets/$suite.jsonl" \
      --methods ar,hf-ar,hf-pld,racer --repeats 3 --max-new-tokens 64 --json "$OUT/bench-$suite-$mode.json"
  done
done
