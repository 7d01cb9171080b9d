#!/usr/bin/env bash
# `tessera plot` as a user runs it: after `tessera train` with csv_monitor and tensorboard, a
# PNG of the requested size from either kind of monitor directory (size read from the PNG's
# IHDR chunk); a directory without monitor files fails naming it.
set -euo pipefail
tessera="$1"; fixtures="$2"
if ! command -v gnuplot >/dev/null; then
  echo "skipped: no gnuplot (scripts/setup.sh installs gnuplot-nox)"; exit 77
fi
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"
cp "$fixtures/corpus.txt" "$work/corpus.txt"
python3 - "$fixtures/train_small.json" "$work" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); work = sys.argv[2]
c["csv_monitor"] = {"enabled": True, "output_path": work + "/mon", "job_name": "csv"}
c["tensorboard"] = {"enabled": True, "output_path": work + "/mon", "job_name": "tb"}
c["train"]["sample_tokens"] = 0
json.dump(c, open(work + "/cfg.json", "w"))
PY
"$tessera" train "$work/cfg.json" --data "$work/corpus.txt" --steps 8 >/dev/null 2>&1
"$tessera" plot "$work/mon/csv" 2>/dev/null
"$tessera" plot "$work/mon/tb" --out "$work/tb.png" --size 640x480 2>/dev/null
size() {  # width x height from the PNG signature and IHDR
  python3 - "$1" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read(24)
assert d[:8] == b"\x89PNG\r\n\x1a\n" and d[12:16] == b"IHDR", "not a PNG"
print("%dx%d" % struct.unpack(">II", d[16:24]))
PY
}
[ "$(size "$work/mon/csv/curves.png")" = 1200x800 ] || { echo "csv plot: $(size "$work/mon/csv/curves.png")"; exit 1; }
[ "$(size "$work/tb.png")" = 640x480 ] || { echo "tb plot: $(size "$work/tb.png")"; exit 1; }
# A rerun appends to the same csv files: its curves are drawn apart ("(run 2)"), not joined
# into one zig-zag line; a path with quotes does not break gnuplot's script.
before=$("$tessera" plot "$work/mon/csv" 2>&1 | sed -n 's/^plot: \([0-9]*\) series.*/\1/p')
"$tessera" train "$work/cfg.json" --data "$work/corpus.txt" --steps 8 >/dev/null 2>&1
after=$("$tessera" plot "$work/mon/csv" --out "$work/it's \"quoted\".png" 2>&1 | sed -n 's/^plot: \([0-9]*\) series.*/\1/p')
[ -n "$before" ] && [ "$after" = $((2 * before)) ] ||
  { echo "a rerun's curves: $before series before, $after after (expected twice as many)"; exit 1; }
[ "$(size "$work/it's \"quoted\".png")" = 1200x800 ] || { echo "a quoted path was not plotted"; exit 1; }
mkdir "$work/empty"
if "$tessera" plot "$work/empty" 2>"$work/err"; then echo "an empty directory was plotted"; exit 1; fi
grep -q "holds no monitor files" "$work/err"
if "$tessera" plot "$work/mon/csv" --size 5x5 2>"$work/err"; then echo "--size 5x5 accepted"; exit 1; fi
grep -q "\-\-size must be WIDTHxHEIGHT" "$work/err"
echo ok
