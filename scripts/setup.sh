#!/usr/bin/env bash
# Installs what Tessera needs from Debian (only what is missing), then configures and builds
# into ./build. Safe to run again: it does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(meson ninja-build pkg-config g++ libeigen3-dev libopenblas-dev nlohmann-json3-dev doctest-dev
          libpcre2-dev libutf8proc-dev libopenmpi-dev openmpi-bin fortunes clang-format
          libprotobuf-dev protobuf-compiler gnuplot-nox libyaml-cpp-dev libsqlite3-dev
          libcpp-httplib-dev libjs-chart.js libssl-dev liburing-dev)
source scripts/lib/debian.sh  # (the repository root is the working directory)
install_missing "${packages[@]}"

# The CUDA backend compiles wherever nvcc is (a GPU is needed only to run it).
if [[ -x /usr/local/cuda/bin/nvcc ]] && ! command -v nvcc >/dev/null; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

# TESSERA_GPU_ARCHS (e.g. "90") narrows the CUDA architectures of a new build (the default,
# meson_options.txt's gpu_archs, covers A100 and H100).
if [[ ! -f build/build.ninja ]]; then
  meson setup build --buildtype=release ${TESSERA_GPU_ARCHS:+-Dgpu_archs=$TESSERA_GPU_ARCHS}
fi
ninja -C build
