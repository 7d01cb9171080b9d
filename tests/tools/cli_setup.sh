# Sourced by the CLI tests (after `set -euo pipefail`) with the tessera binary and the fixtures
# directory as $1 and $2: sets $tessera and $fixtures, makes a fresh $work (its processes killed
# and, unless TESSERA_KEEP is set, it removed on exit) holding the caches and
# tests/fixtures/corpus.txt as corpus.txt, lets MPI run as root and oversubscribe with one
# OpenMP thread per rank, and makes $work the working directory. (The corpus is a frozen copy of
# an earlier README: the tests trained on the README itself until a docs edit moved their
# float32 rounding.)
tessera="$(realpath "$1")"; fixtures="$(realpath "$2")"
work="$(mktemp -d)"; trap 'pkill -9 -f "$work" 2>/dev/null || true; [ -n "${TESSERA_KEEP:-}" ] || rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache" OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cp "$fixtures/corpus.txt" "$work/corpus.txt"
cd "$work"
# Under the sanitizers (scripts/test_sanitizers.sh sets TESSERA_SANITIZER_SUBSET, unless
# `scripts/test.sh --full`) a matrix runs only its cases named in $sanitizer_cases: one per
# code path, since ASan looks for memory errors and the release pass has compared every case.
# `skip_under_sanitizer JOB` is true for a case left out there, and lists it in skipped.txt for
# the script's checks to pass over.
skip_under_sanitizer() {
  [ -n "${TESSERA_SANITIZER_SUBSET:-}" ] && [[ " $(echo ${sanitizer_cases:-}) " != *" $1 "* ]] || return 1
  echo "$1" >> skipped.txt
}
skipped() { grep -qx "$1" skipped.txt 2>/dev/null; }  # left out by skip_under_sanitizer
# Names what the sanitizer pass left out, if anything (at the end of a matrix script).
report_sanitizer_skips() {
  [ ! -e skipped.txt ] || echo "under the sanitizers, left to the release pass: $(tr '\n' ' ' < skipped.txt)"
}
# `expect_bad CONFIG RANKS MESSAGE`: training CONFIG on RANKS processes fails and prints MESSAGE.
expect_bad() {
  if mpirun -np "$2" "$tessera" train "$1" > "$1.out" 2>&1; then echo "$1 accepted"; exit 1; fi
  grep -qF "$3" "$1.out" || { echo "$1: expected '$3', got:"; cat "$1.out"; exit 1; }
}
# `resume_at JOB STEP RESUMED`: JOB.json trained to STEP with a checkpoint, then resumed from it
# to the end as job RESUMED (its csv_monitor holds the resumed steps alone; RESUMED.out its
# --json line), unless the sanitizer pass leaves RESUMED out.
resume_at() {
  skip_under_sanitizer "$3" && return 0
  sed "s/\"job_name\": \"$1\"/\"job_name\": \"$3\"/" "$1.json" > "$3.json"
  "$tessera" train "$3.json" --steps "$2" --save "$3.ckpt" --json > /dev/null 2>&1
  rm -r "monitors/$3"
  "$tessera" train "$3.json" --resume "$3.ckpt" --json > "$3.out" 2> "$3.err"
  grep -q "resumed at step $2" "$3.err"
}
