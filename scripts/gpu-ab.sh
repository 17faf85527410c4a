#!/usr/bin/env bash
# A/B of decode and prompt speed on the GPU machine: the tree as it is ("new") against an older
# tree ("old"), each built in its own folder and tuned by its own `lamina tune` into its own
# cache, then benchmarked alternating old / new, two rounds.
#   here:   git archive REV CMakeLists.txt cmake src tools | gzip > .carry/ab/old.tar.gz
#           (REV: the tree before the change; ~400 KB)
#   there:  scripts/gpu-ab.sh .carry/ab/old.tar.gz     (after scripts/gpu-check.sh built build-gpu
#                                                      and generated the models in $MODELS)
# Prints the pp/tg lines of `lamina bench` (10 repetitions: pp512's spread over 3 is 8-13 %) with
# old/new and the round in front; $OUT/ab.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: scripts/gpu-ab.sh OLD_TREE.tar.gz}
OUT="${OUT:-$PWD/gpu-logs}"; mkdir -p "$OUT"
MODELS="${MODELS:-/tmp/lamina-models}"
[ -x build-gpu/tools/lamina ] || { echo "gpu-ab: build build-gpu first (scripts/gpu-check.sh)"; exit 1; }
A=/tmp/lamina-ab; rm -rf $A/old && mkdir -p $A/old $A/tune-old $A/tune-new
tar -xzf "$OLD" -C $A/old
extra=()
[ -f /usr/include/pcre2.h ] || extra+=("-DLAMINA_EXTRA_INCLUDE=$PWD/.carry/include")
if ! { cmake -S $A/old -B $A/old/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAMINA_CUDA=ON -DLAMINA_TESTS=OFF "${extra[@]}" &&
       cmake --build $A/old/build -j 16 --target lamina_cli; } > "$OUT/ab-build-old.log" 2>&1; then
  tail -30 "$OUT/ab-build-old.log"; exit 1
fi
bin() { [ "$1" = old ] && echo $A/old/build/tools/lamina || echo "$PWD/build-gpu/tools/lamina"; }
models=()
for m in llama2-7b-q4_0 llama2-7b-q8_0 llama2-7b-f16 llama3-8b-q4_0; do [ -f "$MODELS/$m.gguf" ] && models+=("$m"); done
for m in "${models[@]}"; do
  p=512; [ "$m" = llama2-7b-q8_0 ] && p=512,4096
  for b in old new; do
    LAMINA_TUNE_CACHE_DIR=$A/tune-$b "$(bin $b)" tune -m "$MODELS/$m.gguf" --batch 1 --prompt $p > "$OUT/ab-tune-$b-$m.log" 2>&1 ||
      echo "tune $b $m failed"
  done
done
for round in 1 2; do
  for m in "${models[@]}"; do
    for b in old new; do
      LAMINA_TUNE_CACHE_DIR=$A/tune-$b "$(bin $b)" bench -m "$MODELS/$m.gguf" -p 512 -n 128 -r 10 -d cuda 2>/dev/null |
        grep -E "pp512|tg128" | sed "s/^/$b r$round /"
    done
  done
  [ -f "$MODELS/llama2-7b-q8_0.gguf" ] && for b in old new; do
    LAMINA_TUNE_CACHE_DIR=$A/tune-$b "$(bin $b)" bench -m "$MODELS/llama2-7b-q8_0.gguf" -p 0 -n 0 --pg 4096,128 -r 3 -d cuda 2>/dev/null |
      grep pp4096 | sed "s/^/$b r$round /"
  done
done | tee "$OUT/ab.log"
