#!/usr/bin/env bash
# The sanitizer build (build-sanitize): clang with AddressSanitizer and UndefinedBehaviorSanitizer
# (any report ends the process), the test suite, and the libFuzzer targets of fuzz/.
# Installs clang, its sanitizer/fuzzer runtimes and OpenMP from Debian when missing.
# Used by scripts/fuzz.sh and scripts/test_sanitizers.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(clang libclang-rt-14-dev libomp-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "sanitize_setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ ! -f build-sanitize/build.ninja ]]; then
  CC=clang CXX=clang++ meson setup build-sanitize --buildtype=debugoptimized -Dcuda=disabled \
    -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcpp_args=-fno-sanitize-recover=all -Dcpp_link_args=-fno-sanitize-recover=all >/dev/null
fi
ninja -C build-sanitize
