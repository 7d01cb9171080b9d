#!/usr/bin/env bash
# `tessera train` as a user runs it: N+M steps straight must equal N steps, save, and a
# resumed run in a new process to N+M, bit for bit (the printed %.9g loss). Also checks the
# CSV-free defaults run, a BERT config trains, SIGTERM stops with a checkpoint that resumes,
# and a bad config fails naming its key.
set -euo pipefail
tessera="$1"; fixtures="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"  # keep token caches out of the real home
cp "$fixtures/corpus.txt" "$work/corpus.txt"
cfg="$fixtures/train_small.json"
straight=$("$tessera" train "$cfg" --data "$work/corpus.txt" --steps 12 --json 2>"$work/a.err" | tail -1)
"$tessera" train "$cfg" --data "$work/corpus.txt" --steps 6 --save "$work/ckpt" --json >/dev/null 2>"$work/b.err"
test -f "$work/ckpt/latest" && test "$(cat "$work/ckpt/latest")" = step6
resumed=$("$tessera" train "$cfg" --data "$work/corpus.txt" --resume "$work/ckpt" --steps 12 --json 2>"$work/c.err" | tail -1)
echo "straight: $straight"; echo "resumed:  $resumed"
loss() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["step"], repr(d["train_loss"]), repr(d["val_loss"]))' "$1"; }
[ "$(loss "$straight")" = "$(loss "$resumed")" ] || { echo "resume differs"; exit 1; }
grep -q "resumed at step 6" "$work/c.err"
# train.keep_last: only the newest checkpoints stay; `latest` names the newest.
python3 - "$cfg" "$work/keep.json" "$work/keep" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["train"].update({"checkpoint_dir": sys.argv[3], "checkpoint_interval": 2, "keep_last": 2, "sample_tokens": 0})
json.dump(c, open(sys.argv[2], "w"))
PY
"$tessera" train "$work/keep.json" --data "$work/corpus.txt" --steps 10 >/dev/null 2>"$work/keep.err"
[ "$(ls "$work/keep" | tr '\n' ' ')" = "latest step10 step8 " ] || { echo "keep_last 2 left: $(ls "$work/keep")"; exit 1; }
[ "$(cat "$work/keep/latest")" = step10 ]
# SIGTERM during training (a scheduler's preemption): a checkpoint of the step in progress, exit
# status 143, and --resume continues from it.
python3 - "$cfg" "$work/long.json" "$work/preempt" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["train"].update({"checkpoint_dir": sys.argv[3], "sample_tokens": 0, "eval_interval": 0})
json.dump(c, open(sys.argv[2], "w"))
PY
"$tessera" train "$work/long.json" --data "$work/corpus.txt" --steps 1000000 > /dev/null 2> "$work/long.err" &
job=$!
for _ in $(seq 600); do grep -q "step [0-9]" "$work/long.err" && break; sleep 0.05; done
kill -TERM "$job"
status=0; wait "$job" || status=$?
[ "$status" = 143 ] || { echo "SIGTERM: exit status $status, expected 143"; cat "$work/long.err"; exit 1; }
grep -q "stopping at step .* (SIGTERM)" "$work/long.err"
stopped=$(cat "$work/preempt/latest")
"$tessera" train "$work/long.json" --data "$work/corpus.txt" --resume "$work/preempt" \
  --steps $(( ${stopped#step} + 2 )) > /dev/null 2> "$work/long2.err"
grep -q "resumed at step ${stopped#step}" "$work/long2.err"
echo "SIGTERM at $stopped: checkpoint, exit status 143, resumed"
# A bad value stops before any work, naming the key.
sed 's/"lr": 3e-3/"lr": "fast"/' "$cfg" > "$work/bad.json"
if "$tessera" train "$work/bad.json" --data "$work/corpus.txt" 2>"$work/bad.err"; then echo "bad config accepted"; exit 1; fi
grep -q "'optimizer.params.lr' must be a number" "$work/bad.err"
echo ok
