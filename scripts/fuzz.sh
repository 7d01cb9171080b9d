#!/usr/bin/env bash
# Fuzzes every parser that reads a user's file: `scripts/fuzz.sh [SECONDS]` (default 60 per
# target) builds build-sanitize (clang, ASan + UBSan, libFuzzer) and runs each fuzz/ target
# from its committed seeds (fuzz/corpus/<target>/), keeping what it finds in
# build-sanitize/fuzz-corpus/. Prints runs, coverage and crashes per target; a crash leaves
# its input in build-sanitize/fuzz-crashes/ and makes the exit status 1.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
./scripts/sanitize_setup.sh >/dev/null
mkdir -p build-sanitize/fuzz-crashes
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1" UBSAN_OPTIONS="print_stacktrace=1"
export OMP_NUM_THREADS=1
status=0
for src in fuzz/fuzz_*.cpp; do
  t="$(basename "$src" .cpp)"
  corpus="build-sanitize/fuzz-corpus/$t"
  mkdir -p "$corpus"
  log="build-sanitize/$t.log"
  if "build-sanitize/fuzz/$t" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 \
       -print_final_stats=1 -artifact_prefix="build-sanitize/fuzz-crashes/$t-" \
       "$corpus" "fuzz/corpus/${t#fuzz_}" >"$log" 2>&1; then
    result=ok
  else
    result=CRASH; status=1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo ?)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo ?)
  echo "$t: $result, $runs runs in ${seconds} s, coverage $cov edges, corpus $(ls "$corpus" | wc -l) inputs"
  [ "$result" = ok ] || grep -m3 -E "ERROR|runtime error|Assertion|terminate" "$log" || true
done
exit $status
