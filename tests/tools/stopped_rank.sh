#!/usr/bin/env bash
# Every blocking wait honours distributed.timeout_s: in each parallel mode (data parallel,
# tensor parallel, pipeline, 3D) one rank is stopped (SIGSTOP) mid-training, and the job must
# end within timeout_s + 10 s with a message naming a rank and the operation it waited on.
# (Before, a stopped rank under tensor parallelism or a pipeline hung the job: those groups
# were made before the timeout was set, and kept the 30-minute default.)
set -uo pipefail
[ -z "${TESSERA_SANITIZED:-}" ] || { echo "timeouts: release build only (skipped)"; exit 77; }
source "$(dirname "$0")/cli_setup.sh"
fails=0
timeout_s=3
python3 - "$fixtures/train_small.json" "$timeout_s" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["data"]["path"] = "corpus.txt"; c["train"].update({"steps": 100000, "eval_interval": 0, "sample_tokens": 0})
c["steps_per_print"] = 1; c["distributed"] = {"timeout_s": float(sys.argv[2])}
modes = {"dp": {}, "tp": {"tensor_parallel": {"autotp_size": 2}}, "pp": {"pipeline": {"stages": 2}},
         "3d": {"pipeline": {"stages": 2}, "tensor_parallel": {"autotp_size": 2}}}
for name, extra in modes.items():
    json.dump({**c, **extra}, open(f"{name}.json", "w"))
PY
# Tokenise once, so that every run starts training at once.
"$tessera" train dp.json --steps 1 >/dev/null 2>&1

for mode in dp tp pp 3d; do
  np=2; [ "$mode" = 3d ] && np=4
  mpirun -np $np "$tessera" train "$work/$mode.json" > "$mode.out" 2>&1 &
  job=$!
  for _ in $(seq 300); do grep -q "^step 3/" "$mode.out" && break; sleep 0.1; done
  victim=""
  for p in $(pgrep -f "train $work/$mode.json"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  if [ -z "$victim" ]; then
    echo "FAIL $mode: rank 1 never started training"; tail -3 "$mode.out"; fails=$((fails + 1))
    kill -9 $job 2>/dev/null; continue
  fi
  t0=$(date +%s%N)
  kill -STOP "$victim"
  # (Alone, 3 s + OpenMPI's 2 s teardown; beside another test, its teardown of a stopped
  # process took 7 s once: a hang would take the 30-minute default.)
  limit=$((timeout_s + 10))
  timeout $((limit + 30)) tail --pid=$job -f /dev/null
  took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  kill -CONT "$victim" 2>/dev/null; kill -9 "$victim" 2>/dev/null; wait $job 2>/dev/null
  if [ "$took_ms" -le $((limit * 1000)) ] &&
     grep -q "rank [0-9]*: [a-z_]* of .* did not finish within $timeout_s s" "$mode.out"; then
    echo "ok   $mode: a stopped rank ended the job in $took_ms ms: $(grep -o 'rank [0-9]*: [a-z_]* of [^ ]*' "$mode.out" | head -1)"
  else
    echo "FAIL $mode: the job with a stopped rank took $took_ms ms (limit ${limit} s):"
    tail -3 "$mode.out"; fails=$((fails + 1))
  fi
done
echo "$fails failed"
[ "$fails" = 0 ]
