#!/usr/bin/env bash
# Installs lamina's build and test dependencies from Debian packages (idempotent).
# Skips apt entirely when everything is already present, so a second run is fast.
set -euo pipefail

PKGS=(build-essential cmake ninja-build ccache pkg-config python3 python3-pip
      libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libpcre2-dev
      clang libclang-rt-dev libcpp-httplib-dev chromium chromium-driver python3-venv)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python packages from PyPI in a virtual environment of our own (Debian's Python is externally
# managed): Selenium drives Chromium in the chat page's browser test; the official openai client
# talks to lamina serve in the client test.
VENV="${LAMINA_VENV:-$HOME/.cache/lamina/venv}"
if ! "$VENV/bin/python" -c "import selenium, openai" 2>/dev/null; then
  echo "deps: installing selenium and openai into $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "selenium>=4.10,<5" "openai>=1.30,<3"
fi
