#!/usr/bin/env bash
# Every C++ and CUDA source follows .clang-format (clang-format 14, Debian 12's); prints the
# files that do not and the fix. Skipped (77) without clang-format.
set -uo pipefail
src="$1"
command -v clang-format >/dev/null || { echo "no clang-format: skipped"; exit 77; }
cd "$src"
bad=()
while IFS= read -r -d '' f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(find core autograd backends nn optim io testing parallel models engine launch trial experiment tools tests \
              examples fuzz include -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' \
              -o -name '*.cuh' \) -print0 | sort -z)
if ((${#bad[@]})); then
  printf 'not formatted: %s\n' "${bad[@]}"
  echo "fix: clang-format -i ${bad[*]}"
  exit 1
fi
echo "format: ok"
