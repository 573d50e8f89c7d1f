#!/usr/bin/env bash
# Lay out here what tests/gpu_head_checks.sh carries to the GPU machine (all of it git-ignored):
# .whl (wheels for that machine's Python 3.12), .gpu/twin (config and tokenizer of the default model),
# .gpu/a and .gpu/b (the default model's GGUF, xz-compressed and split so each call stays under 64 MiB),
# the trained head (compressed) and the md5 sums the checks compare.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
grep -qx "/.gpu/" .git/info/exclude || echo "/.gpu/" >> .git/info/exclude
grep -qx "/.whl/" .git/info/exclude || echo "/.whl/" >> .git/info/exclude
rm -rf .gpu && mkdir -p .gpu/a .gpu/b .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl transformers==5.23.0 gguf==0.19.0 pyahocorasick==2.3.1
$PY -m specviz dev random-model --out .gpu/twin
gguf=$($PY -c "from specviz.runtime.loading import packaged_gguf_dir, GGUF_FILE; print(packaged_gguf_dir() / GGUF_FILE)")
head=$($PY -c "from specviz.runtime.draft_head import head_path; from specviz.runtime.loading import load_model
print(head_path(load_model()))")
xz -T2 -6 -c "$gguf" > .gpu/gguf.xz
head -c ${SPLIT_BYTES:-50000000} .gpu/gguf.xz > .gpu/a/gguf.xz.part
tail -c +$((${SPLIT_BYTES:-50000000} + 1)) .gpu/gguf.xz > .gpu/b/gguf.xz.part
rm .gpu/gguf.xz
xz -T2 -6 -c "$head" > .gpu/b/head.safetensors.xz
(cd "$(dirname "$gguf")" && md5sum "$(basename "$gguf")"; cd "$(dirname "$head")" && md5sum "$(basename "$head")") \
  > .gpu/b/md5.txt
du -cb .whl .gpu/a .gpu/twin | tail -1; du -cb .gpu/b | tail -1
