#!/usr/bin/env bash
# The pipeline bubble as measured beside each schedule's own at unit cost, in one run on this
# machine: GPT-2 of 4 blocks (C 256, T 64) split 2 / 2 over 2 ranks of one core each, 8
# micro-batches of 4, 16 steps, under 1F1B, ZB-H1 and the interleaved schedule (2 chunks of one
# block per stage). Each stage reports the median over the steps after the first; the
# pipeline's figure is the stages' mean. A timing: run it alone on the machine. (It was a test
# until a loaded CI machine measured 0.179 for 1F1B's 0.111; the schedules' bubbles at unit
# cost are asserted exactly in tests/parallel/test_pipe_schedule.cpp.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tessera="${TESSERA:-$root/build/tools/tessera}"
[ -x "$tessera" ] || { echo "bench_pipeline.sh: no $tessera (build first: meson compile -C build)" >&2; exit 2; }
# A fresh working directory with the corpus, MPI allowed as root, one OpenMP thread a rank.
source "$root/tests/tools/cli_setup.sh" "$tessera" "$root/tests/fixtures"
python3 - "$fixtures/train_small.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["data"]["path"] = "corpus.txt"
d["model"].update({"n_layer": 4, "n_embd": 256, "n_head": 4, "block_size": 64, "dropout": 0.0})
d["train_batch_size"], d["gradient_accumulation_steps"] = 32, 8
d["train"].update({"steps": 16, "eval_interval": 0, "sample_tokens": 0})
d["scheduler"]["params"]["total_num_steps"] = 16
for schedule in ("1f1b", "zb-h1", "interleaved"):
    d["pipeline"] = {"stages": 2, "partition": "type:GPT2Block", "schedule": schedule}
    json.dump(d, open(schedule + ".json", "w"))
PY
for schedule in 1f1b zb-h1 interleaved; do
  mpirun -np 2 --bind-to core "$tessera" train $schedule.json --json > $schedule.out \
    2> $schedule.err </dev/null || { echo "$schedule failed:"; tail -5 $schedule.err; exit 1; }
done
python3 - <<'PY'
import json
p, m, v = 2, 8, 2
textbook = {"1f1b": (p - 1) / (m + p - 1), "zb-h1": (p - 1) / (3 * m + p - 1),
            "interleaved": (p - 1) / (v * m + p - 1)}
print(f"{'schedule':<12} {'stage 0':>8} {'stage 1':>8} {'pipeline':>9} {'unit cost':>10} {'ratio':>6} {'tokens/s':>9}")
for schedule, want in textbook.items():
    stages, rates = {}, []
    for line in open(schedule + ".out").read().splitlines():
        r = json.loads(line)
        stages[r["pipeline"]["stage"]] = r["pipeline"]["bubble_fraction"]
        if "tokens_per_s" in r:
            rates.append(r["tokens_per_s"])
    mean = sum(stages.values()) / len(stages)
    rate = f"{max(rates):9.0f}" if rates else f"{'-':>9}"
    print(f"{schedule:<12} {stages.get(0, 0):8.3f} {stages.get(1, 0):8.3f} {mean:9.3f} {want:10.3f} "
          f"{mean / want:5.2f}x {rate}")
PY
