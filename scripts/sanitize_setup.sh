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
  # -O2 with line tables only: a report's stack names files and lines, and the build takes a
  # tenth less time than with full debug information.
  CC=clang CXX=clang++ meson setup build-sanitize -Doptimization=2 -Ddebug=false -Db_ndebug=false \
    -Dcuda=disabled -Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false \
    "-Dcpp_args=-fno-sanitize-recover=all -gline-tables-only" \
    -Dcpp_link_args=-fno-sanitize-recover=all >/dev/null
fi
ninja -C build-sanitize
