#!/usr/bin/env bash
# Installs lamina's build and test dependencies from Debian packages (idempotent).
# Skips apt entirely when everything is already present, so a second run is fast.
set -euo pipefail

PKGS=(build-essential cmake ninja-build ccache pkg-config python3 python3-pip
      libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev libpcre2-dev
      clang libclang-rt-dev libcpp-httplib-dev)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
