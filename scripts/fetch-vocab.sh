#!/usr/bin/env bash
# Fetches llama.cpp's tokenizer test vocabularies (vocab-only GGUFs with .inp/.out vectors)
# from the llama-cpp-python source distribution on PyPI, which carries llama.cpp's models/
# folder. Only the ggml-vocab-* files are kept, under ~/.cache/lamina/vocab (idempotent).
# Used by the tokenizer tests; they skip these vocabularies visibly when this cannot run.
set -euo pipefail
VERSION=0.3.8
DEST="${LAMINA_VOCAB_DIR:-$HOME/.cache/lamina/vocab}"
if [ -f "$DEST/.complete-$VERSION" ]; then
  echo "$DEST"; exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp" >&2
mkdir -p "$DEST"
tar -xzf "$tmp"/llama_cpp_python-$VERSION.tar.gz -C "$tmp" --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*'
cp "$tmp"/llama_cpp_python-$VERSION/vendor/llama.cpp/models/ggml-vocab-* "$DEST"/
touch "$DEST/.complete-$VERSION"
echo "$DEST"
