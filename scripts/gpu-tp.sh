#!/usr/bin/env bash
# Tensor parallelism on a machine of several GPUs (issue #35), on the build gpu-check.sh makes
# (build-gpu): the same greedy tokens from 1 and N GPUs in exact mode, and tg128 / pp512 of the
# Llama-3-8B and Llama-2-70B shapes (`lamina gen-model`, in $MODELS) on 1 and N GPUs (N = 2, and
# 4 where the machine has them; a count whose GPUs cannot hold the file is skipped), each after
# `lamina tune` for its shapes; beside them llama.cpp's layer split over the same GPUs when
# LLAMA_BENCH names a llama-bench built with CUDA. Logs under $OUT; a table last. Run alone or
# from gpu-check.sh (GPU_CHECK_TP=0 skips it there). TP_MODELS picks the files as preset:type
# (default llama3-8b:q4_0 llama2-70b:q4_0; llama2-70b:f16 is the 4-GPU case).
# Decode's all-reduces: the default (--tp-all-reduce fused: the peer kernel fused with the residual
# add and the next norm, pending where the row is narrow enough, else computed), each row also
# with the all-reduce and the add+norm apart (peer) and with NCCL alone. The 8B file
# also runs the batching engine (bench --parallel) on 1 and N GPUs (TP_PARALLEL=0 skips it).
# TP_COUNTS overrides the GPU counts benchmarked (default "1 2", or "1 2 4" on 4 GPUs).
# First `lamina kbench allreduce` on 2 (and 4) GPUs: each all-reduce way alone, µs per call.
# Keeps NVLink multicast off (NCCL_NVLS_ENABLE=0).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-logs}"; mkdir -p "$OUT"
MODELS="${MODELS:-/tmp/lamina-models}"
L="${LAMINA_BIN:-$PWD/build-gpu/tools/lamina}"  # (gpu-check.sh names its CLI: build/ when prebuilt)
export NCCL_NVLS_ENABLE=0
export LAMINA_TUNE_CACHE_DIR="${LAMINA_TUNE_CACHE_DIR:-$OUT}"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$gpus" -lt 2 ]; then echo "gpu-tp: $gpus GPU(s): nothing to run"; exit 0; fi
ranks="2"; [ "$gpus" -ge 4 ] && ranks="2 4"
gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
[ -n "$gpu_mib" ] || { echo "gpu-tp: nvidia-smi gave no memory size"; exit 1; }
vocab=$(ls .carry/shared/data/vocab/ggml-vocab-llama-spm.gguf ../shared/data/vocab/ggml-vocab-llama-spm.gguf 2>/dev/null | head -1)
mkdir -p "$MODELS"
TP_MODELS="${TP_MODELS:-llama3-8b:q4_0 llama2-70b:q4_0}"
TP_MODELS=$(for pt in $TP_MODELS; do [[ $pt == *:* ]] && echo "$pt" || echo "$pt:q4_0"; done)  # (type q4_0 when none given)
for pt in $TP_MODELS; do
  f="$MODELS/${pt%:*}-${pt#*:}.gguf"
  [ -f "$f" ] || "$L" gen-model --preset ${pt%:*} --type ${pt#*:} --vocab "$vocab" -o "$f" > "$OUT/gen-${pt/:/-}.log" 2>&1
done
fits() {  # fits FILE N: the file takes at most 85 % of N GPUs' memory
  local mib=$(( $(stat -c %s "$1") / 1048576 ))
  [ $((mib * 100)) -le $((gpu_mib * $2 * 85)) ]
}
rc=0
rows=()
# The decode all-reduce alone, each way, µs per call (a developer build: lamina kbench).
for n in $ranks; do
  "$L" kbench --help 2>/dev/null | grep allreduce >/dev/null || break
  "$L" kbench allreduce --tp $n > "$OUT/kbench-allreduce-$n.log" 2>&1 || rc=1
  rows+=("$(grep -E '^\| +(width|[0-9]+) \|' "$OUT/kbench-allreduce-$n.log" | sed "s/^/kbench allreduce, $n GPUs: /")")
done
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
# replicas FILE NAME N C: N one-GPU engines started together on GPUs 0..N-1, C / N users each
# (bench --parallel); prints their generated t/s summed (each process times its own run, and the
# runs overlap but do not start and end together).
replicas() {
  local i pids=()
  for i in $(seq 0 $(($3 - 1))); do
    CUDA_VISIBLE_DEVICES=$i "$L" bench -m "$1" -d cuda -p 128 -n 128 --parallel $(($4 / $3)) \
      > "$OUT/tp-replica-$2-$3-$4-$i.log" 2>&1 & pids+=($!)
  done
  wait "${pids[@]}"
  awk -F'|' '/^\| +[0-9]+ \|/ { s += $4 } END { printf "%.2f", s }' "$OUT"/tp-replica-$2-$3-$4-*.log
}
row() {  # row LOG LABEL: the bench table's model rows, labelled
  rows+=("$(grep -E '^\| llama' "$1" | sed "s/^/$2: /")")
}
counts="${TP_COUNTS:-1 $ranks}"
for pt in $TP_MODELS; do
  m=${pt/:/-}
  f="$MODELS/$m.gguf"
  [ -f "$f" ] || continue
  for n in $counts; do
    fits "$f" $n || { rows+=("lamina $m tp $n: skipped (the file does not fit $n GPUs)"); continue; }
    "$L" tune -m "$f" --batch 1 --prompt 512 --tp $n > "$OUT/tp-tune-$m-$n.log" 2>&1 || { rc=1; echo "tune $m tp $n failed"; tail -3 "$OUT/tp-tune-$m-$n.log"; }
    "$L" bench -m "$f" -p 512 -n 128 -r 3 -d cuda --tp $n > "$OUT/tp-bench-$m-$n.log" 2>&1 || { rc=1; tail -3 "$OUT/tp-bench-$m-$n.log"; }
    row "$OUT/tp-bench-$m-$n.log" "lamina $m tp $n"
    [ $n -gt 1 ] || continue
    for ar in peer nccl; do
      "$L" bench -m "$f" -p 0 -n 128 -r 3 -d cuda --tp $n --tp-all-reduce $ar > "$OUT/tp-bench-$m-$n-$ar.log" 2>&1 || rc=1
      row "$OUT/tp-bench-$m-$n-$ar.log" "lamina $m tp $n, --tp-all-reduce $ar"
    done
  done
  if [ $m = llama3-8b-q4_0 ] && [ "${TP_PARALLEL:-1}" = 1 ]; then  # the batching engine (#10's workload)
    for n in $counts; do
      "$L" bench -m "$f" -d cuda -p 128 -n 128 --parallel 1,16,64,128 --tp $n > "$OUT/tp-parallel-$m-$n.log" 2>&1 || rc=1
      rows+=("$(grep -E '^\| +[0-9]+ \|' "$OUT/tp-parallel-$m-$n.log" | sed "s/^/lamina $m parallel, tp $n: /")")
      [ $n -gt 1 ] || continue
      # batches of up to 64 rows through the peer kernel instead of NCCL (kbench allreduce's question)
      "$L" bench -m "$f" -d cuda -p 128 -n 128 --parallel 16,64,128 --tp $n --tp-peer-rows 64 \
        > "$OUT/tp-parallel-$m-$n-peer64.log" 2>&1 || rc=1
      rows+=("$(grep -E '^\| +[0-9]+ \|' "$OUT/tp-parallel-$m-$n-peer64.log" | sed "s/^/lamina $m parallel, tp $n, --tp-peer-rows 64: /")")
      for c in 16 64 128; do  # beside it: n one-GPU replicas at once, c / n users each
        rows+=("lamina $m parallel, $n one-GPU replicas, $c users: $(replicas "$f" $m $n $c) gen t/s summed")
      done
    done
  fi
  if [ -n "${LLAMA_BENCH:-}" ]; then  # llama.cpp: one GPU, and GPUs 0..N-1 by layers (its default split)
    for n in $counts; do
      fits "$f" $n || continue
      devs=$(seq -s, 0 $((n - 1)))
      CUDA_VISIBLE_DEVICES=$devs "$LLAMA_BENCH" -m "$f" -p 512 -n 128 -r 3 -ngl 99 -fa 1 -sm layer \
        > "$OUT/llama-bench-$m-$n.log" 2>&1 || rc=1
      row "$OUT/llama-bench-$m-$n.log" "llama.cpp $m $n GPU(s) by layer"
    done
  fi
done
echo "== tensor parallel on $gpus x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
printf '%s\n' "${rows[@]}" | tee "$OUT/tp-summary.txt"
exit $rc
