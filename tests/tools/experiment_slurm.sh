#!/usr/bin/env bash
# `resources.scheduler: slurm`: an experiment's trial of 2 slots as a Slurm job (srun
# --mpi=pmix) reaches the same validations as the same trial under mpirun here, and `kill`
# cancels a running job (scancel). Skipped (exit 77) where no Slurm cluster answers; docs/slurm.md
# sets up a one-machine one.
set -euo pipefail
tessera="$(realpath "$1")"; fixtures="$(realpath "$2")"
if ! command -v srun >/dev/null || ! timeout 10 sinfo -h >/dev/null 2>&1; then
  echo "SKIPPED: no Slurm cluster answers here (srun/sinfo)"; exit 77
fi
work="$(mktemp -d)"
cleanup() {  # (a cancelled job's tasks may still be writing for a moment)
  scancel --name tessera-e3-t1 2>/dev/null || true
  for _ in $(seq 20); do rm -rf "$work" 2>/dev/null && return 0; sleep 0.5; done
}
trap cleanup EXIT
source "$(dirname "$0")/experiment_setup.sh"
python3 - <<'PY'
body = """entrypoint: builtin:gpt2
hyperparameters: {config: small.json, train.eval_iters: 2}
searcher: {name: single, metric: validation_loss, max_length: {batches: %d}}
min_validation_period: {batches: 20}
resources:
  slots_per_trial: 2
  scheduler: %s
"""
open("local.yaml", "w").write("name: local\n" + body % (40, "local"))
open("slurm.yaml", "w").write("name: slurm\n" + body % (40, "slurm"))
open("long.yaml", "w").write("name: long\n" + body % (100000, "slurm"))
PY
"$tessera" experiment create local.yaml --follow --json > local.out 2> local.err
"$tessera" experiment create slurm.yaml --follow --json > slurm.out 2> slurm.err ||
  { cat slurm.err; "$tessera" experiment logs 2; exit 1; }
python3 - <<'PY'
import json
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in ("local.out", "slurm.out"))
assert b["state"] == "COMPLETED", b
va, vb = a["trials"][0]["best_validation"], b["trials"][0]["best_validation"]
assert va == vb, (va, vb)
print(f"Slurm trial: {vb} as under mpirun")
PY
"$tessera" experiment create long.yaml --json > /dev/null 2>&1
for _ in $(seq 300); do squeue -h -n tessera-e3-t1 | grep -q . && break; sleep 0.2; done
"$tessera" experiment kill 3 > /dev/null
for _ in $(seq 75); do squeue -h -n tessera-e3-t1 -t PENDING,RUNNING | grep -q . || break; sleep 0.2; done
if squeue -h -n tessera-e3-t1 -t PENDING,RUNNING | grep -q .; then
  echo "the killed trial's job still runs:"; squeue; exit 1
fi
echo ok
