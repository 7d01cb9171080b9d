#!/usr/bin/env bash
# The sanitizer build (build-sanitize): clang with AddressSanitizer and UndefinedBehaviorSanitizer
# (any report ends the process), the test suite, and the libFuzzer targets of fuzz/.
# Installs clang, its sanitizer/fuzzer runtimes and OpenMP from Debian when missing.
# Used by scripts/fuzz.sh and scripts/test_sanitizers.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(clang libclang-rt-14-dev libomp-dev)
source scripts/lib/debian.sh  # (the repository root is the working directory)
install_missing "${packages[@]}"
if [[ ! -f build-sanitize/build.ninja ]]; then
  CC=clang CXX=clang++ meson setup build-sanitize --buildtype=debugoptimized -Dcuda=disabled \
    -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcpp_args=-fno-sanitize-recover=all -Dcpp_link_args=-fno-sanitize-recover=all >/dev/null
fi
ninja -C build-sanitize
