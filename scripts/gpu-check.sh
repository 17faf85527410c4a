#!/usr/bin/env bash
# GPU machine check: configure, build (all cores), run every GPU test and the CPU suite, run the
# kernel benchmarks, write logs under $OUT (or ./gpu-logs), and print a short summary last.
# Runs on the lent H100 (Ubuntu 24.04 image, no apt): a pcre2.h carried in .carry/include is
# used when the image lacks libpcre2-dev, and .carry/shared stands in for ../shared (README).
# Set GPU_CHECK_BENCH=0 to skip the benchmarks.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-logs}"
mkdir -p "$OUT"
BUILD=build-gpu
extra=()
[ -f /usr/include/pcre2.h ] || extra+=("-DLAMINA_EXTRA_INCLUDE=$PWD/.carry/include")
[ -d ../shared/data ] || extra+=("-DLAMINA_SHARED_DIR=$PWD/.carry/shared")
export LAMINA_TUNE_CACHE_DIR="$OUT"
summary=()
step() {  # step NAME COMMAND...: runs, logs to $OUT/NAME.log, records pass/fail
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$OUT/$name.log" 2>&1; then summary+=("$(printf '%-14s PASS  %4ds' "$name" $((SECONDS - t0)))")
  else summary+=("$(printf '%-14s FAIL  %4ds  (see %s.log)' "$name" $((SECONDS - t0)) "$name")"); fi
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
step configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAMINA_CUDA=ON "${extra[@]}"
step build cmake --build "$BUILD" -j 16
step gpu-tests ctest --test-dir "$BUILD" -L gpu --output-on-failure
step cpu-tests ctest --test-dir "$BUILD" -L cpu --output-on-failure -j 16
if [ "${GPU_CHECK_BENCH:-1}" = 1 ]; then
  step kbench-gemv "$BUILD/tools/lamina" kbench gemv
  step kbench-gemm "$BUILD/tools/lamina" kbench gemm
fi
echo "== lamina gpu-check on $(cat "$OUT/gpu.txt")"
grep -hE "tests passed|tests failed" "$OUT/gpu-tests.log" "$OUT/cpu-tests.log" 2>/dev/null
for fam in gemv gemm; do
  [ -f "$OUT/kbench-$fam.log" ] && python3 scripts/kbench_summary.py "$OUT/kbench-$fam.log" | tee "$OUT/kbench-$fam-summary.txt"
done
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
! grep -q FAIL "$OUT/summary.txt"
