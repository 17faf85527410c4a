#!/usr/bin/env bash
# One command from a fresh Debian machine to a working lamina: installs dependencies, builds,
# fetches the default model (SmolLM2-135M-Instruct Q4_1) and runs it.
# Usage: scripts/quickstart.sh ["text to tokenize"]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
model=$(scripts/fetch-model.sh)
text="${1:-The capital of France is Paris. Ünïcödé and emoji 🙂 survive the round trip.}"
echo "== lamina info -m $model --no-tensors"
build/tools/lamina info -m "$model" --no-tensors
echo
echo "== lamina tokenize"
ids=$(build/tools/lamina tokenize -m "$model" -p "$text")
echo "$ids"
echo "== lamina detokenize"
build/tools/lamina detokenize -m "$model" "$ids"
