#!/usr/bin/env bash
# Builds lamina and runs the whole CPU test suite through ctest (label cpu), then the GGUF
# fuzzer for a bounded time (clang/libFuzzer build in build-fuzz). Idempotent; a second run
# only rebuilds what changed (ccache keeps CUDA objects across clean clones).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# Test data: the default model and llama.cpp's further tokenizer vocabularies. Tests that need
# them are skipped visibly (never passed) when they cannot be fetched.
if model=$(scripts/fetch-model.sh); then export LAMINA_MODEL="$model"; else echo "test: default model unavailable; its tests will be skipped" >&2; fi
if model=$(scripts/fetch-model.sh gemma3); then export LAMINA_GEMMA3="$model"; else echo "test: Gemma 3 270M unavailable; its tests will be skipped" >&2; fi
if vocab=$(scripts/fetch-vocab.sh); then export LAMINA_VOCAB_DIR="$vocab"; else echo "test: extra vocabularies unavailable; their test will be skipped" >&2; fi

# The CUDA code is compiled wherever nvcc exists, GPU or not (a plain build skips it without a
# GPU): a CUDA build break fails here. Its tests run on a GPU machine (scripts/gpu-check.sh).
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  scripts/build.sh -DLAMINA_CUDA=ON -DLAMINA_KBENCH=ON
else
  scripts/build.sh
fi
ctest --test-dir build -L cpu --output-on-failure -j "$(nproc)"

# Fuzzing: libFuzzer + ASan/UBSan over the GGUF reader, seeded with the malformed corpus.
FUZZ_SECONDS="${LAMINA_FUZZ_SECONDS:-60}"
if command -v clang++ >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/lamina/ccache}" CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
  if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DLAMINA_CUDA=OFF -DLAMINA_FUZZ=ON -DLAMINA_FUZZ_SECONDS="$FUZZ_SECONDS" >/dev/null
  fi
  cmake --build build-fuzz -j "$(nproc)" --target fuzz_gguf
  ctest --test-dir build-fuzz -L fuzz --output-on-failure
else
  echo "test: clang++ not found, fuzzing NOT run (scripts/deps.sh installs it)" >&2
  exit 1
fi
