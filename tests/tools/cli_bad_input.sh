#!/usr/bin/env bash
# Inputs users get wrong: every one must end in "tessera <cmd>: error: ..." naming the thing
# (file, key, option, path) and exit status 1 — never an abort, a crash or a hang — and work
# that cannot be saved must fail before it starts, not after.
set -uo pipefail
tessera="$1"; fixtures="$2"
work="$(mktemp -d)"; trap 'pkill -9 -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache" OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cp "$fixtures/corpus.txt" "$work/corpus.txt"
cfg="$fixtures/train_small.json"
fails=0

source "$(dirname "$0")/expect_error.sh"
config() {  # name python-edit: writes $work/name.json from train_small.json
  python3 - "$cfg" "$work/$1.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); exec(sys.argv[3]); json.dump(c, open(sys.argv[2], "w"))
PY
}
# `train ARGS`: tessera train on the fixture corpus (a script, so `timeout` can run it).
printf '#!/bin/sh\nexec "%s" train "$@" --data "%s"\n' "$tessera" "$work/corpus.txt" > "$work/train"
chmod +x "$work/train"
train() { "$work/train" "$@"; }

# Paths the run would write to, checked before any training.
touch "$work/a-file"
expect "--save into a file" "--save '$work/a-file' is a file" "$work/train" "$cfg" --steps 1 --save "$work/a-file"
expect "--save where nothing can be created" "--save '/proc/tessera-x'" "$work/train" "$cfg" --steps 1 --save /proc/tessera-x
config ckfile "c['train'].update({'checkpoint_dir': '$work/a-file', 'checkpoint_interval': 1})"
expect "train.checkpoint_dir is a file" "train.checkpoint_dir '$work/a-file' is a file" "$work/train" "$work/ckfile.json" --steps 1
config csvfile "c['csv_monitor'] = {'enabled': True, 'output_path': '/proc/tessera-x'}"
expect "csv_monitor.output_path unwritable" "csv_monitor.output_path '/proc/tessera-x'" "$work/train" "$work/csvfile.json" --steps 1

# Options out of range.
expect "--steps beyond int64" "option --steps: expected an integer" "$work/train" "$cfg" --steps 99999999999999999999
expect "--shape beyond int64" "is too large" "$tessera" kernels bench matmul --shape 99999999999999999999,2,2
expect "bench optimizer --params not a count" "--params 'ten' is not a parameter count" "$tessera" bench optimizer --params ten
expect "bench optimizer --params 0" "--params '0' is not a parameter count" "$tessera" bench optimizer --params 0
expect "bench optimizer --params past 1e11" "is not a parameter count in .1, 1e11." "$tessera" bench optimizer --params 2e11
expect "bench optimizer --params beyond memory" "GB are available" "$tessera" bench optimizer --params 90B --python /bin/false
expect "bench optimizer --iters 0" "--iters must be in .1, 1000., got 0" "$tessera" bench optimizer --params 1M --iters 0
expect "generate --temperature nan" "option --temperature: expected a finite number" \
  "$tessera" generate "$fixtures/models/gpt2-tiny" --prompt-ids 1,2 --temperature nan
expect "generate --device cuda:99" "generate: --device cuda:99" \
  "$tessera" generate "$fixtures/models/gpt2-tiny" --prompt-ids 1,2 --device cuda:99
expect "generate --dtype int64" "--dtype must be a floating type, got int64" \
  "$tessera" generate "$fixtures/models/gpt2-tiny" --prompt-ids 1,2 --dtype int64
expect "generate, an empty prompt in a batch" "prompt 1 is empty" \
  "$tessera" generate "$fixtures/models/gpt2-tiny" --prompt-ids "1,2;;3"
expect "generate, two kinds of prompt" "exactly one of --prompt, --prompts or --prompt-ids" \
  "$tessera" generate "$fixtures/models/gpt2-tiny" --prompt-ids 1,2 --prompt hi

# Checkpoints that are not what they say.
train "$cfg" --steps 2 --save "$work/ck" >/dev/null 2>&1 || { echo "FAIL: could not save a checkpoint"; exit 1; }
cp -r "$work/ck" "$work/ck-empty"; : > "$work/ck-empty/latest"
expect "latest is empty" "latest' is empty" "$work/train" "$cfg" --resume "$work/ck-empty"
cp -r "$work/ck" "$work/ck-missing"; echo step99 > "$work/ck-missing/latest"
expect "latest names a missing tag" "names tag 'step99', but" "$work/train" "$cfg" --resume "$work/ck-missing"
for edit in "del j['global_steps']" "j['global_steps'] = 'ten'" "j['global_steps'] = -3" "j['rng'] = 5"; do
  rm -rf "$work/ck-bad"; cp -r "$work/ck" "$work/ck-bad"
  python3 - "$work/ck-bad/step2/engine.json" "$edit" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(j, open(sys.argv[1], "w"))
PY
  want=$(case "$edit" in *rng*) echo "'rng' must be an object";; *del*) echo "'global_steps' is missing";;
         *ten*) echo "'global_steps' must be an integer";; *) echo "'global_steps' is -3";; esac)
  expect "engine.json: $edit" "$want" "$work/train" "$cfg" --resume "$work/ck-bad"
done
config sgd "c['optimizer'] = {'type': 'SGD', 'params': {'lr': 0.1, 'momentum': 0.9}}; c.pop('scheduler')"
expect "AdamW checkpoint resumed as SGD" "the checkpoint's optimizer is AdamW but this run's is SGD" \
  "$work/train" "$work/sgd.json" --resume "$work/ck"

# Files with wrong contents.
python3 - "$fixtures/models/gpt2-tiny/batch.json" "$work" <<'PY'
import json, sys
b = json.load(open(sys.argv[1])); work = sys.argv[2]
s = dict(b); s["input_ids"] = [["a"] * len(b["input_ids"][0])] * len(b["input_ids"])
json.dump(s, open(f"{work}/batch-string.json", "w"))
n = dict(b); n["next_sentence_label"] = ["yes", "no"]
json.dump(n, open(f"{work}/batch-nsp.json", "w"))
w = dict(b); w["input_ids"] = [[2**64 - 1] * len(b["input_ids"][0])] * len(b["input_ids"])
json.dump(w, open(f"{work}/batch-wide.json", "w"))
PY
expect "batch with strings for ids" "\"input_ids\" row 0 holds a non-integer" \
  "$tessera" eval "$fixtures/models/gpt2-tiny" --batch "$work/batch-string.json"
expect "batch with ids past int64" "\"input_ids\" row 0 holds a non-integer or one out of range: 18446744073709551615" \
  "$tessera" eval "$fixtures/models/gpt2-tiny" --batch "$work/batch-wide.json"
expect "batch with strings for NSP labels" "next_sentence_label" \
  "$tessera" eval "$fixtures/models/bert-tiny" --batch "$work/batch-nsp.json"
mkdir -p "$work/huge"; cp "$fixtures/models/gpt2-tiny/config.json" "$work/huge/"
python3 - "$work/huge/model.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"wte.weight": {"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]}}).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h)
PY
expect "safetensors: huge shape, empty range" "tensor 'wte.weight': shape" \
  "$tessera" eval "$work/huge" --batch "$fixtures/models/gpt2-tiny/batch.json"

# distributed.timeout_s far past what a clock holds: no false timeout.
config bigtimeout "c['distributed'] = {'timeout_s': 1e300}; c['train']['sample_tokens'] = 0"
if mpirun -np 2 "$tessera" train "$work/bigtimeout.json" --data "$work/corpus.txt" --steps 2 >"$work/bt.out" 2>&1; then
  echo "ok   distributed.timeout_s 1e300 trains on 2 ranks"
else echo "FAIL distributed.timeout_s 1e300:"; tail -3 "$work/bt.out"; fails=$((fails + 1)); fi

# The wait while rank 0 tokenises honours timeout_s: a 40 MB corpus takes rank 0 seconds, and
# with timeout_s 1 the others give up after about a second, naming the barrier (the default,
# 1800 s, leaves the time real corpora need). Before, that wait ignored timeout_s.
for i in $(seq 900); do cat "$work/corpus.txt"; done > "$work/big.txt"
config shorttimeout "c['distributed'] = {'timeout_s': 1}"
t0=$(date +%s)
timeout 120 mpirun -np 2 "$tessera" train "$work/shorttimeout.json" --data "$work/big.txt" --steps 1 >"$work/st.out" 2>&1
status=$?; took=$(( $(date +%s) - t0 ))
if [ "$status" != 0 ] && [ "$status" != 124 ] && grep -q "rank 1: barrier did not finish within 1 s" "$work/st.out"; then
  echo "ok   rank 1 waiting for rank 0's tokenising gave up after timeout_s: the job ended in ${took} s"
else echo "FAIL the wait for rank 0's tokenising: exit $status after ${took} s"; tail -3 "$work/st.out"; fails=$((fails + 1)); fi

echo "$fails failed"
[ "$fails" = 0 ]
