#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), runs every test suite, again under ASan + UBSan with
# the fuzz targets (scripts/test_sanitizers.sh), builds the example programs (examples/) against
# the installed library through pkg-config, and ends with one line "N passed, N failed,
# N skipped" counting doctest test cases and CLI tests of both builds. Under the sanitizers the
# CLI matrices run one case per code path; `scripts/test.sh --full` runs every case there too.
set -uo pipefail
cd "$(dirname "$0")/.."
full=()
[ "${1:-}" != --full ] || full=(--full)
# Each stage's wall time, printed as it ends and again at the end (CI must stay under 40 min).
stage_times=(); stage_start=$SECONDS
stage_done() {
  stage_times+=("$(printf '%-34s %5d s' "$1" $((SECONDS - stage_start)))"); stage_start=$SECONDS
  echo "test.sh: ${stage_times[-1]}"
}
# Without a GPU the CUDA kernels are only compiled (their tests skip): one architecture proves
# that they compile, in a third less time than the default two (the sources have no
# per-architecture code). A build/ that exists keeps its own.
if ! nvidia-smi -L >/dev/null 2>&1; then export TESSERA_GPU_ARCHS="${TESSERA_GPU_ARCHS:-90}"; fi
./scripts/setup.sh || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
stage_done "set-up and release build"
# A browser for the experiment page's test (tests/tools/experiment_browser.sh; skipped without).
(source scripts/lib/debian.sh && install_missing chromium) ||
  echo "test.sh: no chromium: the browser test is skipped"
# Python with transformers for the comparisons against Hugging Face (skipped without it).
./scripts/test_python.sh || echo "test.sh: no Python with transformers: those comparisons are skipped"
stage_done "browser and Python for the tests"

meson test -C build --print-errorlogs --num-processes 2
meson_status=$?
stage_done "release tests"

# The same suite built with clang under ASan + UBSan, and a short run of every fuzz target.
./scripts/test_sanitizers.sh "${full[@]}" 3
sanitizer_status=$?
stage_done "sanitizer build, tests and fuzzing"

# Users' programs built the documented way: install, then pkg-config (examples/*.cpp).
example_status=0
stage="$(mktemp -d)"
if meson install -C build --destdir "$stage" --quiet >/dev/null; then
  pc="$(find "$stage" -name tessera.pc | head -1)"
  prefix="$stage$(sed -n 's/^prefix=//p' "$pc")"
  flags="$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --define-variable=prefix="$prefix" --cflags --libs tessera)"
  libdir="$(dirname "$(find "$stage" -name 'libtessera.so' | head -1)")"
  # Packaging: a versioned SONAME, and the dependency the public headers carry.
  if readelf -d "$libdir/libtessera.so" | grep -q 'SONAME.*libtessera\.so\.[0-9]' &&
     PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --print-requires tessera | grep -q nlohmann_json; then
    echo "packaging (SONAME, tessera.pc requires nlohmann_json): ok"
  else
    echo "packaging (SONAME, tessera.pc requires nlohmann_json): FAILED"; example_status=1
  fi
  for src in examples/*.cpp; do
    exe="$stage/$(basename "$src" .cpp)"
    # A trial example takes its experiment config (examples/NAME.yaml); it runs in $stage,
    # where its checkpoints go.
    yaml="$PWD/examples/$(basename "$src" .cpp).yaml"; args=()
    [ -f "$yaml" ] && args=("$yaml")
    if c++ "$src" -o "$exe" $flags &&
       (cd "$stage" && LD_LIBRARY_PATH="$libdir" "$exe" "${args[@]}") >"$exe.log" 2>&1; then
      echo "example $src (pkg-config build and run): ok"
    else
      echo "example $src (pkg-config build and run): FAILED"; cat "$exe.log" 2>/dev/null; example_status=1
    fi
  done
else
  echo "meson install failed"; example_status=1
fi
rm -rf "$stage"
# The same against the build tree, without installing (meson's uninstalled tessera.pc).
un="$(mktemp -d)"
if c++ examples/mlp.cpp -o "$un/mlp" $(PKG_CONFIG_PATH=build/meson-uninstalled pkg-config --cflags --libs tessera) &&
   LD_LIBRARY_PATH=build "$un/mlp" > "$un/log" 2>&1; then
  echo "example examples/mlp.cpp (uninstalled pkg-config, build/): ok"
else
  echo "example examples/mlp.cpp (uninstalled pkg-config, build/): FAILED"; cat "$un/log" 2>/dev/null; example_status=1
fi
rm -rf "$un"
stage_done "examples through pkg-config"
printf 'test.sh: %s\n' "${stage_times[@]}"

# Count doctest cases and plain (CLI) tests from meson's log. A test that cannot run here
# (no GPU, no Slurm) is skipped: doctest's skip decorator, exit code 77 for a whole executable.
python3 - "$example_status" "$sanitizer_status" <<'PY'
import json, os, re, subprocess, sys
passed = failed = skipped = 0
summary = re.compile(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed\s*\|\s*(\d+) skipped")

def filtered_out(command):
    """The cases a --test-suite filter left out of a run (the N-ranks runs select the "ranks"
    suite): doctest counts them as skipped, but nothing was skipped."""
    suites = [a for a in command if a.startswith("--test-suite=")]
    exe = next((a for a in command if os.path.basename(a).startswith("test-")), None)
    if not suites or not exe:
        return 0
    def count(*extra):
        out = subprocess.run([exe, "--count", "--no-skip", *extra], capture_output=True, text=True,
                             env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0")).stdout
        m = re.search(r"passing the current filters: (\d+)", out)
        return int(m.group(1)) if m else 0
    return count() - count(*suites)

logs = ["build/meson-logs/testlog.json", "build-sanitize/meson-logs/testlog.json"]
lines = [l for log in logs if os.path.exists(log) for l in open(log)]
for line in lines:
    t = json.loads(line)
    out = re.sub(r"\x1b\[[0-9;]*m", "", t.get("stdout", ""))  # mpirun runs give doctest a terminal
    # Under mpirun every rank prints a summary: a case passed if it passed on every rank.
    ranks = [tuple(int(g) for g in m.groups()[1:]) for m in summary.finditer(out)]
    ok = t["result"] in ("OK", "EXPECTEDFAIL", "SKIP")
    if ranks:
        p, f, s = min(r[0] for r in ranks), max(r[1] for r in ranks), max(r[2] for r in ranks)
        passed += p; failed += f; skipped += max(0, s - filtered_out(t["command"]))
        if not ok and f == 0: failed += 1  # crashed after its summary
    elif t["result"] == "SKIP":
        skipped += 1
    else:
        passed += ok; failed += not ok
passed += int(sys.argv[1]) == 0; failed += int(sys.argv[1]) != 0
# The sanitizer stage itself (its build and fuzz runs; its tests are counted above).
passed += int(sys.argv[2]) == 0; failed += int(sys.argv[2]) != 0
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PY
