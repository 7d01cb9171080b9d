#!/usr/bin/env bash
# `tessera train` on a GPU the way a user runs it: the quickstart config with --device cuda,
# float32 and then bf16 (configs/quickstart.json plus "bf16": {"enabled": true}), on the
# README as a small corpus. Usage: scripts/gpu_train.sh TESSERA_BINARY OUT_DIR
set -uo pipefail
ts="$1"; out="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus="$(mktemp -d)/corpus.txt"
cat "$root"/README.md "$root"/configs/*.json > "$corpus"
runs="$(mktemp -d)"
python3 - "$root/configs/quickstart.json" "$out/quickstart_bf16.json" "$runs" "$runs/monitored.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["bf16"] = {"enabled": True}; c.pop("fp16", None)
json.dump(c, open(sys.argv[2], "w"))
# Observability on the GPU: engine timers (device-synchronised), memory breakdown with the
# GPU's allocator, CSV and TensorBoard monitors, a checkpoint.
c.update(wall_clock_breakdown=True, memory_breakdown=True, steps_per_print=100)
mon = {"enabled": True, "output_path": sys.argv[3], "job_name": "gpu"}
c["csv_monitor"] = dict(mon); c["tensorboard"] = dict(mon)
json.dump(c, open(sys.argv[4], "w"))
PY
for cfg in "$root/configs/quickstart.json" "$out/quickstart_bf16.json"; do
  echo "--- $(basename "$cfg") on cuda"
  "$ts" train "$cfg" --device cuda --data "$corpus" --steps 300 --json 2>&1 | tail -4
done
echo "--- bf16 with wall_clock_breakdown, memory_breakdown, csv_monitor, tensorboard"
"$ts" train "$runs/monitored.json" --device cuda --data "$corpus" --steps 200 --save "$runs/ckpt" 2>&1 \
  | grep -E "time \(ms\)|memory \(MB\)|step 200/|val loss|rror" | tail -8
ls "$runs/gpu" "$runs/ckpt"
head -3 "$runs/gpu/Train_Samples_train_loss.csv" "$runs/gpu/Train_Samples_elapsed_time_ms_forward.csv" 2>&1
echo "--- tessera profile (bf16 on cuda), and a trace of steps 1-2 with kernels (tessera train)"
python3 - "$runs/monitored.json" "$runs/profiled.json" "$runs/traces" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["trace"] = {"enabled": True, "output_path": sys.argv[3], "steps": [1, 2], "kernels": True}
c["flops_profiler"] = {"enabled": True, "profile_step": 2, "detailed": False, "module_depth": 2}
json.dump(c, open(sys.argv[2], "w"))
PY
"$ts" profile "$runs/profiled.json" --device cuda --data "$corpus" --steps 3 --json 2>&1 \
  | grep -E "params per GPU|fwd flops per GPU|latency|FLOPS per GPU|MFU|samples/second|^\{|rror"
# tessera profile writes its report only (a training run's traces stay); the trace comes from a
# three-step training run of the same config.
"$ts" train "$runs/profiled.json" --device cuda --data "$corpus" --steps 3 2>&1 | grep -E "rror"
python3 - "$runs/traces/trace_rank0.json" <<'PY'
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
print("trace events by category:", dict(collections.Counter(e.get("cat", "meta") for e in ev)))
PY
