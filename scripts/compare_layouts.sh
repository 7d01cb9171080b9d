#!/usr/bin/env bash
# Every layout's training losses from two builds of Tessera, compared bit for bit: the check a
# change to the models or the assembly must pass (one model definition for every layout).
#
#   bash scripts/compare_layouts.sh BEFORE_TESSERA AFTER_TESSERA [LAYOUT ...]
#
# e.g. the commit before a change, built beside this tree:
#   git worktree add /tmp/before REV && (cd /tmp/before && meson setup build -Dcuda=disabled &&
#     ninja -C build tools/tessera)
#   bash scripts/compare_layouts.sh /tmp/before/build/tools/tessera build/tools/tessera
#
# Layouts (default: all), each for GPT-2 and BERT with dropout on, 8 steps with gradient
# clipping, from tests/fixtures/corpus.txt: one (1 process), dp2, z1, z2, z3 (ZeRO stages over
# 2 ranks), tp2, sp2 (tensor and sequence parallel), pp2 (1F1B), zbh1, il (interleaved, 2
# chunks per stage), 3d (2 stages x tensor parallel 2, 4 ranks), ac, tp2ac, sp2ac (activation
# checkpointing on one process, at tp2 with partitioned activations, at sp2), sgd, lamb, adaml2
# (SGD with Nesterov momentum, LAMB, Adam with L2 decay, one process). Prints a row per
# run and exits 1 when any step's loss differs in any bit.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
before=$(realpath "$1") after=$(realpath "$2")
shift 2
layouts="${*:-one dp2 z1 z2 z3 tp2 sp2 pp2 zbh1 il 3d ac tp2ac sp2ac sgd lamb adaml2}"
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/tests/fixtures/corpus.txt" "$work/corpus.txt"
cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
python3 - "$root/tests/fixtures/train_small.json" $layouts <<'PY'
import json, sys
base = json.load(open(sys.argv[1]))
base["data"]["path"] = "corpus.txt"
base["model"].update(n_layer=4, n_head=4)
base["gradient_clipping"] = 0.5
base["train_batch_size"], base["gradient_accumulation_steps"] = 8, 2
base["train"].update(steps=8, sample_tokens=0, eval_interval=0)
base["scheduler"]["params"]["total_num_steps"] = 8
layouts = {
    "one": {}, "dp2": {}, "z1": {"zero_optimization": {"stage": 1}},
    "z2": {"zero_optimization": {"stage": 2}}, "z3": {"zero_optimization": {"stage": 3}},
    "tp2": {"tensor_parallel": {"autotp_size": 2}},
    "sp2": {"tensor_parallel": {"autotp_size": 2, "sequence_parallel": True}},
    "pp2": {"pipeline": {"stages": 2}},
    "zbh1": {"pipeline": {"stages": 2, "schedule": "zb-h1"}},
    "il": {"pipeline": {"stages": 2, "schedule": "interleaved", "virtual_stages": 2}},
    "3d": {"pipeline": {"stages": 2}, "tensor_parallel": {"autotp_size": 2}},
    "ac": {"activation_checkpointing": {}},
    "tp2ac": {"tensor_parallel": {"autotp_size": 2},
              "activation_checkpointing": {"partition_activations": True}},
    "sp2ac": {"tensor_parallel": {"autotp_size": 2, "sequence_parallel": True},
              "activation_checkpointing": {}},
    # The optimizers other than the base config's AdamW, in one process.
    "sgd": {"optimizer": {"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9,
                                                    "nesterov": True, "weight_decay": 0.01}}},
    "lamb": {"optimizer": {"type": "Lamb", "params": {"lr": 0.01, "weight_decay": 0.01}}},
    "adaml2": {"optimizer": {"type": "Adam", "params": {"lr": 0.002, "weight_decay": 0.01,
                                                        "adam_w_mode": False}}},
}
bert = {"type": "bert", "n_layer": 4, "n_head": 4, "n_embd": 32, "block_size": 16, "dropout": 0.1}
for name in sys.argv[2:]:
    if name not in layouts:
        sys.exit(f"compare_layouts.sh: unknown layout '{name}' (one of {' '.join(layouts)})")
    for model in ("gpt2", "bert"):
        d = json.loads(json.dumps(base))
        if model == "bert":
            d["model"] = dict(bert)
        d.update(json.loads(json.dumps(layouts[name])))
        job = f"{model}-{name}"
        d["csv_monitor"] = {"enabled": True, "output_path": "csv", "job_name": job}
        json.dump(d, open(job + ".json", "w"))
PY
ranks() { case $1 in one|ac|sgd|lamb|adaml2) echo 1;; 3d) echo 4;; *) echo 2;; esac; }
status=0
printf "%-12s %6s %8s  %s\n" run ranks steps result
for name in $layouts; do
  for model in gpt2 bert; do
    job=$model-$name
    for side in before after; do
      bin=$before
      [ "$side" = after ] && bin=$after
      rm -rf csv
      if ! mpirun -np "$(ranks "$name")" --oversubscribe "$bin" train "$job.json" --json \
        > "$job.$side.out" 2> "$job.$side.err"; then
        echo "$job: the $side build failed:"; tail -3 "$job.$side.err"; status=1; continue 2
      fi
      cp csv/"$job"/Train_Samples_train_loss.csv "$job.$side.csv"
    done
    python3 - "$job" "$(ranks "$name")" <<'PY' || status=1
import csv, sys
job, ranks = sys.argv[1], sys.argv[2]
rows = [[r[1] for r in csv.reader(open(f"{job}.{side}.csv"))][1:] for side in ("before", "after")]
same = rows[0] == rows[1] and len(rows[0]) > 0
first = next((i for i, (a, b) in enumerate(zip(*rows)) if a != b), None)
why = (f"DIFFERS at step {first + 1}: {rows[0][first]} vs {rows[1][first]}" if first is not None
       else f"DIFFERS: {len(rows[0])} steps vs {len(rows[1])}")
print(f"{job:<12} {ranks:>6} {len(rows[1]):>8}  " + ("bit-identical" if same else why))
sys.exit(0 if same else 1)
PY
  done
done
exit $status
