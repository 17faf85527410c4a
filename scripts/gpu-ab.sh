#!/usr/bin/env bash
# A/B of decode and prompt speed on the GPU machine: the tree as it is ("new") against an older
# tree ("old"), built in the same build folder (the old files overlaid, lamina rebuilt, then the
# new files back: only what differs recompiles), tuned once by the new build into one tune cache,
# then benchmarked alternating old / new, two rounds.
#   here:   git archive REV CMakeLists.txt cmake src tests tools | gzip > .carry/ab/old.tar.gz
#           (REV: the tree before the change; only those folders: they are what is swapped)
#   there:  scripts/gpu-ab.sh .carry/ab/old.tar.gz           (after scripts/gpu-check.sh built build-gpu
#                                                            and generated the models in $MODELS)
# Prints the pp/tg lines of `lamina bench` with old/new and the round in front; $OUT/ab.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: scripts/gpu-ab.sh OLD_TREE.tar.gz}
OUT="${OUT:-$PWD/gpu-logs}"; mkdir -p "$OUT"
MODELS="${MODELS:-/tmp/lamina-models}"
BUILD=build-gpu
export LAMINA_TUNE_CACHE_DIR=/tmp/lamina-ab-tune; mkdir -p "$LAMINA_TUNE_CACHE_DIR"
[ -f "$BUILD/build.ninja" ] || { echo "gpu-ab: build $BUILD first (scripts/gpu-check.sh)"; exit 1; }
keep=$(mktemp -d)
cp -r src tests tools CMakeLists.txt cmake "$keep/"
restore() { rm -rf src tests tools cmake && cp -r "$keep"/src "$keep"/tests "$keep"/tools "$keep"/cmake . && cp "$keep/CMakeLists.txt" .; }
tar -xzmf "$OLD"  # -m: the overlaid files count as changed
if ! cmake --build "$BUILD" -j 16 --target lamina_cli > "$OUT/ab-build-old.log" 2>&1; then
  restore; tail -30 "$OUT/ab-build-old.log"; exit 1
fi
cp "$BUILD/tools/lamina" /tmp/lamina-old
restore
cmake --build "$BUILD" -j 16 --target lamina_cli > "$OUT/ab-build-new.log" 2>&1 || { tail -30 "$OUT/ab-build-new.log"; exit 1; }
cp "$BUILD/tools/lamina" /tmp/lamina-new
models=()
for m in llama2-7b-q4_0 llama2-7b-q8_0 llama2-7b-f16 llama3-8b-q4_0; do [ -f "$MODELS/$m.gguf" ] && models+=("$m"); done
for m in "${models[@]}"; do
  p=512; [ "$m" = llama2-7b-q8_0 ] && p=512,4096
  /tmp/lamina-new tune -m "$MODELS/$m.gguf" --batch 1 --prompt $p > "$OUT/ab-tune-$m.log" 2>&1 || echo "tune $m failed"
done
for round in 1 2; do
  for m in "${models[@]}"; do
    for b in old new; do
      /tmp/lamina-$b bench -m "$MODELS/$m.gguf" -p 512 -n 128 -r 3 -d cuda 2>/dev/null | grep -E "pp512|tg128" | sed "s/^/$b r$round /"
    done
  done
  [ -f "$MODELS/llama2-7b-q8_0.gguf" ] && for b in old new; do
    /tmp/lamina-$b bench -m "$MODELS/llama2-7b-q8_0.gguf" -p 0 -n 0 --pg 4096,128 -r 2 -d cuda 2>/dev/null | grep pp4096 | sed "s/^/$b r$round /"
  done
done | tee "$OUT/ab.log"
