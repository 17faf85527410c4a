#!/usr/bin/env bash
# Per-kernel wall time of the decode graph: runs `lamina bench -p 0 -n 64` under a CUPTI kernel
# trace and prints, per kernel kind and per position in the step, the time each adds to a token.
#   scripts/trace-decode.sh MODEL.gguf [BUILD_DIR]      (GPU machine; needs cupti_activity.h and
#   libcupti, e.g. from the nvidia-cuda-cupti wheel that PyTorch installs)
set -euo pipefail
model=${1:?usage: scripts/trace-decode.sh MODEL.gguf [BUILD_DIR]}
build=${2:-build-gpu}
here=$(cd "$(dirname "$0")" && pwd)
hdr=$(find / -name cupti_activity.h -not -path "/proc/*" 2>/dev/null | head -1 || true)
lib=$(find / -name "libcupti.so*" -not -path "/proc/*" 2>/dev/null | head -1 || true)
[ -n "$hdr" ] && [ -n "$lib" ] || { echo "trace-decode: CUPTI headers or library not found" >&2; exit 1; }
# the newest kernel record struct this CUPTI declares
krec=$(grep -oE "\} CUpti_ActivityKernel[0-9]+;" "$hdr" | tail -1 | grep -oE "CUpti_ActivityKernel[0-9]+" || true)
[ -n "$krec" ] || { echo "trace-decode: no kernel record type in $hdr" >&2; exit 1; }
mrec=$(grep -oE "\} CUpti_ActivityMemcpy[0-9]+;" "$hdr" | tail -1 | grep -oE "CUpti_ActivityMemcpy[0-9]+" || true)
[ -n "$mrec" ] || { echo "trace-decode: no memcpy record type in $hdr" >&2; exit 1; }
tmp=$(mktemp -d)
g++ -O2 -shared -fPIC -DKREC="$krec" -DMREC="$mrec" -I"$(dirname "$hdr")" -I/usr/local/cuda/include "$here/trace/cupti_trace.cpp" \
  -o "$tmp/libtrace.so" "$lib" -Wl,-rpath,"$(dirname "$lib")"
TRACE_OUT="$tmp/trace.txt" CUDA_INJECTION64_PATH="$tmp/libtrace.so" \
  "$build/tools/lamina" bench -m "$model" -p 0 -n 64 -r 1 -d cuda > "$tmp/bench.log"
python3 "$here/trace/steps.py" "$tmp/trace.txt" 30
