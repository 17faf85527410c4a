#!/usr/bin/env bash
# Tensor parallelism on a machine of several GPUs (issue #35), on the build gpu-check.sh makes
# (build-gpu): the same greedy tokens from 1 and N GPUs in exact mode, and tg128 / pp512 of the
# Llama-3-8B and Llama-2-70B shapes (q4_0, `lamina gen-model`, in $MODELS) on 1 and N GPUs, each
# after `lamina tune` for its shapes; beside them llama.cpp's layer split over the same GPUs when
# LLAMA_BENCH names a llama-bench built with CUDA. Logs under $OUT; a table last. Run alone or
# from gpu-check.sh (GPU_CHECK_TP=0 skips it there). TP_MODELS picks the shapes (default both).
# Decode's all-reduces go through the peer kernel (the default); the 8B rows also show NCCL alone
# and the peer kernel fused with the residual add and the next norm (--tp-all-reduce fused).
# Keeps NVLink multicast off (NCCL_NVLS_ENABLE=0).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-logs}"; mkdir -p "$OUT"
MODELS="${MODELS:-/tmp/lamina-models}"
L="$PWD/build-gpu/tools/lamina"
export NCCL_NVLS_ENABLE=0
export LAMINA_TUNE_CACHE_DIR="${LAMINA_TUNE_CACHE_DIR:-$OUT}"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -lt 2 ]; then echo "gpu-tp: $gpus GPU(s): nothing to run"; exit 0; fi
ranks="2"; [ "$gpus" -ge 4 ] && ranks="2 4"
vocab=$(ls .carry/shared/data/vocab/ggml-vocab-llama-spm.gguf ../shared/data/vocab/ggml-vocab-llama-spm.gguf 2>/dev/null | head -1)
mkdir -p "$MODELS"
TP_MODELS="${TP_MODELS:-llama3-8b llama2-70b}"
for p in $TP_MODELS; do
  [ -f "$MODELS/$p-q4_0.gguf" ] || "$L" gen-model --preset $p --type q4_0 --vocab "$vocab" -o "$MODELS/$p-q4_0.gguf" > "$OUT/gen-$p.log" 2>&1
done
rc=0
rows=()
# The same tokens: exact mode (f32 activations), 1 GPU against N.
M8="$MODELS/llama3-8b-q4_0.gguf"
[ -f "$M8" ] && {
"$L" run -m "$M8" -p "The capital of France is" -n 32 --temp 0 -d cuda --exact-matmul --no-display-prompt > "$OUT/tp-tok-1.txt" 2>/dev/null || rc=1
for n in $ranks; do
  "$L" run -m "$M8" -p "The capital of France is" -n 32 --temp 0 -d cuda --exact-matmul --tp $n --no-display-prompt \
    > "$OUT/tp-tok-$n.txt" 2>"$OUT/tp-run-$n.log" || rc=1
  if cmp -s "$OUT/tp-tok-1.txt" "$OUT/tp-tok-$n.txt"; then rows+=("llama3-8b exact: $n GPUs print 1 GPU's 32 tokens")
  else rows+=("llama3-8b exact: $n GPUs DIFFER from 1 GPU: $(cmp "$OUT/tp-tok-1.txt" "$OUT/tp-tok-$n.txt")"); rc=1; fi
done
}
for m in $TP_MODELS; do
  f="$MODELS/$m-q4_0.gguf"
  [ -f "$f" ] || continue
  for n in 1 $ranks; do
    "$L" tune -m "$f" --batch 1 --prompt 512 --tp $n > "$OUT/tp-tune-$m-$n.log" 2>&1 || { rc=1; echo "tune $m tp $n failed"; tail -3 "$OUT/tp-tune-$m-$n.log"; }
    "$L" bench -m "$f" -p 512 -n 128 -r 3 -d cuda --tp $n > "$OUT/tp-bench-$m-$n.log" 2>&1 || { rc=1; tail -3 "$OUT/tp-bench-$m-$n.log"; }
    rows+=("$(grep -E '^\| llama' "$OUT/tp-bench-$m-$n.log" | sed "s/^/lamina $m tp $n: /")")
    if [ $n -gt 1 ] && [ $m = llama3-8b ]; then
      "$L" bench -m "$f" -p 0 -n 128 -r 3 -d cuda --tp $n --tp-all-reduce nccl > "$OUT/tp-bench-$m-$n-nccl.log" 2>&1 || rc=1
      rows+=("$(grep -E '^\| llama' "$OUT/tp-bench-$m-$n-nccl.log" | sed "s/^/lamina $m tp $n, NCCL only: /")")
      "$L" bench -m "$f" -p 0 -n 128 -r 3 -d cuda --tp $n --tp-all-reduce fused > "$OUT/tp-bench-$m-$n-fused.log" 2>&1 || rc=1
      rows+=("$(grep -E '^\| llama' "$OUT/tp-bench-$m-$n-fused.log" | sed "s/^/lamina $m tp $n, all-reduce+add+norm fused: /")")
    fi
  done
  if [ $m = llama3-8b ]; then  # the batching engine (#10's workload) on 1 and N GPUs
    for n in 1 $ranks; do
      "$L" bench -m "$f" -d cuda -p 128 -n 128 --parallel 1,16,64,128 --tp $n > "$OUT/tp-parallel-$m-$n.log" 2>&1 || rc=1
      rows+=("$(grep -E '^\| +[0-9]+ \|' "$OUT/tp-parallel-$m-$n.log" | sed "s/^/lamina $m parallel, tp $n: /")")
    done
  fi
  if [ -n "${LLAMA_BENCH:-}" ]; then  # llama.cpp: every GPU by layers (its default split), and one GPU
    "$LLAMA_BENCH" -m "$f" -p 512 -n 128 -r 3 -ngl 99 -fa 1 -sm layer > "$OUT/llama-bench-$m-layer.log" 2>&1 || rc=1
    CUDA_VISIBLE_DEVICES=0 "$LLAMA_BENCH" -m "$f" -p 512 -n 128 -r 3 -ngl 99 -fa 1 > "$OUT/llama-bench-$m-1.log" 2>&1 || rc=1
    rows+=("$(grep -E '^\| llama' "$OUT/llama-bench-$m-layer.log" | sed "s/^/llama.cpp $m $gpus GPUs by layer: /")")
    rows+=("$(grep -E '^\| llama' "$OUT/llama-bench-$m-1.log" | sed "s/^/llama.cpp $m 1 GPU: /")")
  fi
done
echo "== tensor parallel on $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
printf '%s\n' "${rows[@]}" | tee "$OUT/tp-summary.txt"
exit $rc
