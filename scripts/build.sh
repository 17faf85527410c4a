#!/usr/bin/env bash
# Configures and builds lamina into ./build (Release, Ninja, ccache when present).
# Extra CMake arguments are passed through, e.g. scripts/build.sh -DLAMINA_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${LAMINA_BUILD_DIR:-build}"
JOBS="${LAMINA_JOBS:-$(nproc)}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/lamina/ccache}"
# Paths under the checkout hash as relative ones, so that another clone of the same sources
# (CI's fresh clone) hits the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
if [ ! -f "$BUILD_DIR/build.ninja" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
