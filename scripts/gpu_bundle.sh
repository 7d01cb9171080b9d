#!/usr/bin/env bash
# Packs what a GPU machine needs to run the CUDA suite and benchmarks without building:
# the library, the CLI, the test programs and every shared library they use that is not part
# of glibc/libstdc++ or the CUDA libraries found on that machine. Writes .gpu/bundle.tar.xz
# (ignored by git; carried by the device tool). Run after `meson compile -C build`.
set -euo pipefail
cd "$(dirname "$0")/.."
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/build/tools" "$stage/build/tests" "$stage/lib" .gpu
# The library carries its soname (libtessera.so.MAJOR.MINOR): the binaries ask for that name.
soname="$(readelf -d build/tools/tessera | sed -n 's/.*NEEDED.*\[\(libtessera[^]]*\)\].*/\1/p')"
cp -L "build/$soname" "$stage/build/$soname"
cp build/tools/tessera "$stage/build/tools/"
find build/tests -maxdepth 1 -type f -name 'test-*' -executable -exec cp {} "$stage/build/tests/" \;
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|libdl\.so|libpthread|librt\.so|libcublas|libcudnn|libnccl|libtessera)'
for bin in "build/$soname" build/tools/tessera build/tests/test-*; do
  [ -f "$bin" ] && [ -x "$bin" ] || continue
  ldd "$bin" | awk '/=>/ {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  [ -f "$path" ] && cp -L "$path" "$stage/lib/$name"
done
tar -C "$stage" -cJf .gpu/bundle.tar.xz .
ls -la .gpu/bundle.tar.xz
