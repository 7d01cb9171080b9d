#!/usr/bin/env bash
# `tessera train` with the tensorboard and csv_monitor sections: TensorBoard's own reader
# (EventAccumulator, from scripts/test_python.sh's venv) finds every event the CSV files hold,
# at the same steps (samples) and values (float32, TensorBoard's simple_value), the last
# train_loss equal to the --json line's, and the lr DeepSpeed's WarmupLR gives (hand-derived).
set -euo pipefail
tessera="$1"; fixtures="$2"; python="$3"
if ! "$python" -c "import tensorboard" 2>/dev/null; then
  echo "skipped: no tensorboard package (scripts/test_python.sh installs it)"; exit 77
fi
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"
cp "$fixtures/corpus.txt" "$work/corpus.txt"
python3 - "$fixtures/train_small.json" "$work" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
work = sys.argv[2]
c["scheduler"] = {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.004,
                                                 "warmup_num_steps": 4, "warmup_type": "linear"}}
c["wall_clock_breakdown"] = True
c["tensorboard"] = {"enabled": True, "output_path": work + "/tb", "job_name": "run"}
c["csv_monitor"] = {"enabled": True, "output_path": work + "/csv", "job_name": "run"}
c["train"]["sample_tokens"] = 0
json.dump(c, open(work + "/cfg.json", "w"))
PY
"$tessera" train "$work/cfg.json" --data "$work/corpus.txt" --steps 6 --json 2>"$work/err" | tail -1 > "$work/result.json"
ls "$work"/tb/run/events.out.tfevents.* >/dev/null
"$python" - "$work" <<'PY'
import csv, glob, json, os, sys
import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
work = sys.argv[1]
acc = EventAccumulator(os.path.join(work, "tb", "run"))
acc.Reload()
tags = set(acc.Tags()["scalars"])
files = glob.glob(os.path.join(work, "csv", "run", "*.csv"))
want = {"Train/Samples/train_loss", "Train/Samples/lr", "Eval/val_loss",
        "Train/Samples/elapsed_time_ms_forward", "Train/Samples/elapsed_time_ms_backward",
        "Train/Samples/elapsed_time_ms_step"}
assert want <= tags, f"missing tags: {want - tags}"
assert len(files) == len(tags), (files, tags)
for tag in tags:
    rows = list(csv.reader(open(os.path.join(work, "csv", "run", tag.replace("/", "_") + ".csv"))))
    assert rows[0] == ["step", tag.split("/")[-1]], rows[0]
    events = acc.Scalars(tag)
    assert [e.step for e in events] == [int(r[0]) for r in rows[1:]], (tag, events, rows)
    for e, r in zip(events, rows[1:]):
        assert e.value == np.float32(float(r[1])), (tag, e.value, r[1])
# Samples on x: 4 a step; the lr after step k is WarmupLR's at iteration k - 1 (linear over 4).
assert [e.step for e in acc.Scalars("Train/Samples/train_loss")] == [4, 8, 12, 16, 20, 24]
lr = [e.value for e in acc.Scalars("Train/Samples/lr")]
expect = [np.float32(0.004 * min(i, 4) / 4) for i in range(6)]
assert lr == expect, (lr, expect)
result = json.load(open(os.path.join(work, "result.json")))
assert acc.Scalars("Train/Samples/train_loss")[-1].value == np.float32(result["train_loss"])
assert acc.Scalars("Eval/val_loss")[-1].value == np.float32(result["val_loss"])
print(f"tensorboard: {len(tags)} tags read back, equal to the CSV files and the --json line")
PY
echo ok
