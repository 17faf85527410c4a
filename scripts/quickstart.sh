#!/usr/bin/env bash
# One command from a fresh Debian machine to a working lamina: installs dependencies, builds,
# fetches the default model (SmolLM2-135M-Instruct Q4_1) and asks it a question.
# Usage: scripts/quickstart.sh ["your question"]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
model=$(scripts/fetch-model.sh)
question="${1:-What is the capital of France? Answer in one sentence.}"
build/tools/lamina info -m "$model" --no-tensors
echo
echo "Q: $question"
echo -n "A: "
# One chat turn (the model's ChatML template), greedy, answer on stdout; stats on stderr.
printf '%s\n' "$question" | build/tools/lamina chat -m "$model" --temp 0 -n 256 2>/dev/null
