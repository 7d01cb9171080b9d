#!/usr/bin/env bash
# Installs what Tessera needs from Debian (only what is missing), then configures and builds
# into ./build. Safe to run again: it does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(meson ninja-build pkg-config g++ libeigen3-dev libopenblas-dev nlohmann-json3-dev doctest-dev
          libpcre2-dev libutf8proc-dev libopenmpi-dev openmpi-bin fortunes)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The CUDA backend compiles wherever nvcc is (a GPU is needed only to run it).
if [[ -x /usr/local/cuda/bin/nvcc ]] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

if [[ ! -f build/build.ninja ]]; then
  meson setup build --buildtype=release
fi
ninja -C build
