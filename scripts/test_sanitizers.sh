#!/usr/bin/env bash
# The whole test suite (MPI tests included) under AddressSanitizer and UndefinedBehaviorSanitizer
# (clang; any report fails the test), then every fuzz target for SECONDS (default 10) from its
# seeds. Part of scripts/test.sh; the meson log is build-sanitize/meson-logs/testlog.json.
set -uo pipefail
cd "$(dirname "$0")/.."
full=0
[ "${1:-}" != --full ] || { full=1; shift; }
seconds="${1:-10}"
start=$SECONDS
./scripts/sanitize_setup.sh >/dev/null || { echo "sanitizer build failed"; exit 1; }
echo "test_sanitizers.sh: build $((SECONDS - start)) s"; start=$SECONDS
# The transformers comparison uses the Python scripts/test_python.sh made beside build/.
[[ -e build-sanitize/test-python || ! -d build/test-python ]] || ln -s ../build/test-python build-sanitize/test-python
# OpenMPI's own allocations at exit are reported as leaks: leak checking stays off.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1"
# Checks that are about time (timeouts, throughput ratios, measured bubbles) run in the release
# build only: under the sanitizers they would measure ASan, not Tessera.
export TESSERA_SANITIZED=1
# The CLI matrices run one case per code path here (the release pass runs them all), unless
# --full (scripts/test.sh --full).
[ "$full" = 1 ] || export TESSERA_SANITIZER_SUBSET=1
meson test -C build-sanitize --print-errorlogs --num-processes 2
tests=$?
echo "test_sanitizers.sh: tests $((SECONDS - start)) s"; start=$SECONDS
./scripts/fuzz.sh "$seconds"
fuzz=$?
echo "test_sanitizers.sh: fuzzing $((SECONDS - start)) s"
[ "$tests" = 0 ] && [ "$fuzz" = 0 ]
