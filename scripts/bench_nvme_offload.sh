#!/usr/bin/env bash
# What offload_optimizer {"device": "nvme"} costs a step, and how much of it pipelining hides:
# the small preset's shapes (GPT-2, 6 layers x 384, block 256, batch 8, one rank, float32,
# AdamW, DeepSpeed's default sub_group_size and buffer_count) at ZeRO-1 and ZeRO-2, each
# trained with its state in memory, on disk, and on disk with pipeline_read and pipeline_write,
# in one run, alternating. A step's time is the engine's forward + backward + step
# (wall_clock_breakdown, per step through the CSV monitor), the median over every step but the
# first of every repeat; the "step" column is that part alone (the update and what it waits for).
#   I/O time   = step(disk) - step(memory)
#   hidden     = (step(disk) - step(disk, pipelined)) / I/O time
# Usage: scripts/bench_nvme_offload.sh [SWAP_DIR] [--repeats N] [--steps N]
# SWAP_DIR (default a new directory under /tmp) is where the swap files go: point it at the
# disk you mean to train on. Run it alone: anything else on the cores distorts the times.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="" repeats=3 steps=8
while [ $# -gt 0 ]; do
  case "$1" in
    --repeats) repeats="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    -*) echo "bench_nvme_offload.sh: unknown option $1" >&2; exit 2 ;;
    *) dir="$1"; shift ;;
  esac
done
[[ "$repeats" =~ ^[1-9][0-9]*$ && "$steps" =~ ^[1-9][0-9]*$ ]] ||
  { echo "bench_nvme_offload.sh: --repeats and --steps take positive integers" >&2; exit 2; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
[ -n "$dir" ] || dir="$work/swap"
mkdir -p "$dir"
python3 - "$work" "$dir" "$steps" "$PWD/tests/fixtures/corpus.txt" <<'PY'
import json, sys
work, swap, steps, corpus = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
base = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.1}},
        "steps_per_print": 10**6, "zero_optimization": {}, "wall_clock_breakdown": True,
        "model": {"type": "gpt2", "n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256, "dropout": 0.0},
        "data": {"tokenizer": "char", "path": corpus},
        "train": {"steps": steps, "seed": 1, "eval_interval": 0, "sample_tokens": 0}}
nvme = {"device": "nvme", "nvme_path": swap}
for stage in (1, 2):
    for name, offload in (("memory", None), ("disk", nvme),
                          ("pipelined", dict(nvme, pipeline_read=True, pipeline_write=True))):
        c = json.loads(json.dumps(base))
        c["zero_optimization"]["stage"] = stage
        if offload: c["zero_optimization"]["offload_optimizer"] = offload
        json.dump(c, open(f"{work}/z{stage}-{name}.json", "w"))
PY
for r in $(seq 1 "$repeats"); do
  for job in z1-memory z1-disk z1-pipelined z2-memory z2-disk z2-pipelined; do
    python3 -c "import json, sys; c = json.load(open(sys.argv[1])); c['csv_monitor'] = {'enabled': True,
      'output_path': sys.argv[2], 'job_name': sys.argv[3]}; json.dump(c, open(sys.argv[1], 'w'))" \
      "$work/$job.json" "$work/csv" "$job-$r"
    ./build/tools/tessera train "$work/$job.json" --json 2>"$work/$job.err" | grep '^{' | tail -1 \
      >> "$work/$job.jsonl" || { cat "$work/$job.err"; exit 1; }
  done
done
python3 - "$work" "$repeats" <<'PY'
import csv, json, statistics, sys
work, repeats = sys.argv[1], int(sys.argv[2])
def phase(job, r, name):  # {step: ms}
    with open(f"{work}/csv/{job}-{r}/Train_Samples_elapsed_time_ms_{name}.csv") as f:
        return {int(row["step"]): float(row[f"elapsed_time_ms_{name}"]) for row in csv.DictReader(f)}
def times(job):  # median step and median "step" phase over every step but the first, all repeats
    whole, update = [], []
    for r in range(1, repeats + 1):
        fwd, bwd, upd = (phase(job, r, n) for n in ("forward", "backward", "step"))
        for s in sorted(fwd)[1:]:
            whole.append(fwd[s] + bwd[s] + upd[s]); update.append(upd[s])
    last = json.loads(open(f"{work}/{job}.jsonl").readline())
    return statistics.median(whole), statistics.median(update), last
print(f"{'':6} {'memory ms':>10} {'disk ms':>9} {'pipelined':>10} {'I/O ms':>7} {'hidden':>7}   "
      f"{'step: memory':>12} {'disk':>6} {'pipelined':>9} {'hidden':>7} {'on disk MB':>10} {'losses':>7}")
for stage in (1, 2):
    (mem, um, a), (disk, ud, b), (pipe, up, c) = (times(f"z{stage}-{n}")
                                                  for n in ("memory", "disk", "pipelined"))
    hidden = lambda m, d, p: f"{(d - p) / (d - m):7.0%}" if d > m else f"{'-':>7}"
    same = a["train_loss"] == b["train_loss"] == c["train_loss"]
    print(f"ZeRO-{stage} {mem:10.1f} {disk:9.1f} {pipe:10.1f} {disk - mem:7.1f} {hidden(mem, disk, pipe)}   "
          f"{um:12.1f} {ud:6.1f} {up:9.1f} {hidden(um, ud, up)} {b['memory']['disk'] / 2**20:10.1f} "
          f"{'equal' if same else 'DIFFER':>7}")
PY
