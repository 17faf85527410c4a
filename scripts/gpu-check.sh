#!/usr/bin/env bash
# GPU machine check: configure, build (all cores), run every GPU test and the CPU suite, write
# logs under $OUT (or ./gpu-logs), and print a short summary table last.
# Runs on the lent H100 (Ubuntu 24.04 image, no apt): a pcre2.h carried in .carry/include is
# used when the image lacks libpcre2-dev (see README, "GPU machine").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-logs}"
mkdir -p "$OUT"
BUILD=build-gpu
extra=()
[ -f /usr/include/pcre2.h ] || extra+=("-DLAMINA_EXTRA_INCLUDE=$PWD/.carry/include")
# ../shared does not travel to the GPU machine: use the carried copy of its data.
[ -d ../shared/data ] || extra+=("-DLAMINA_SHARED_DIR=$PWD/.carry/shared")
summary=()
step() {  # step NAME COMMAND...: runs, logs to $OUT/NAME.log, records pass/fail
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$OUT/$name.log" 2>&1; then summary+=("$(printf '%-18s PASS  %4ds' "$name" $((SECONDS - t0)))")
  else summary+=("$(printf '%-18s FAIL  %4ds  (see %s.log)' "$name" $((SECONDS - t0)) "$name")"); fi
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader > "$OUT/gpu.txt" 2>&1
step configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLAMINA_CUDA=ON "${extra[@]}"
step build cmake --build "$BUILD" -j 16
step gpu-tests ctest --test-dir "$BUILD" -L gpu --output-on-failure
step cpu-tests ctest --test-dir "$BUILD" -L cpu --output-on-failure -j 16
echo "== lamina gpu-check on $(cat "$OUT/gpu.txt")"
grep -hE "tests passed|Passed|Failed|PASSED|FAILED" "$OUT/gpu-tests.log" | tail -4
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
! grep -q FAIL "$OUT/summary.txt"
