#!/usr/bin/env bash
# Slurm's launcher: `srun --mpi=pmix -n 2 tessera train` (ZeRO-3) gives every rank the
# single-process losses, as mpirun does. Skipped (exit 77, meson's skip, with the reason) where no Slurm
# cluster answers; to run it on one machine see docs/slurm.md.
set -euo pipefail
tessera="$1"; fixtures="$2"
if ! command -v srun >/dev/null || ! timeout 10 sinfo -h >/dev/null 2>&1; then
  echo "SKIPPED: no Slurm cluster answers here (srun/sinfo)"; exit 77
fi
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache" OMP_NUM_THREADS=1
cp "$fixtures/corpus.txt" "$work/corpus.txt"
python3 - "$fixtures/train_dist.json" "$work/cfg.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["csv_monitor"] = {"enabled": False}
c["zero_optimization"]["stage"] = 3
json.dump(c, open(sys.argv[2], "w"))
PY
"$tessera" train "$work/cfg.json" --data "$work/corpus.txt" --json 2>/dev/null | tail -1 > "$work/one.json"
timeout 300 srun --mpi=pmix -n 2 "$tessera" train "$work/cfg.json" --data "$work/corpus.txt" --json 2>"$work/srun.err" | grep '^{' > "$work/two.json" || { cat "$work/srun.err"; exit 1; }
python3 - "$work/one.json" "$work/two.json" <<'PY'
import json, sys
one = json.loads(open(sys.argv[1]).read())
ranks = [json.loads(l) for l in open(sys.argv[2])]
assert sorted(r["rank"] for r in ranks) == [0, 1] and all(r["world_size"] == 2 for r in ranks), ranks
rel = max(abs(r["train_loss"] - one["train_loss"]) / one["train_loss"] for r in ranks)
print(f"srun -n 2 (ZeRO-3): step {ranks[0]['step']} loss {ranks[0]['train_loss']} vs one process {one['train_loss']}, rel {rel:.1e}")
assert rel <= 1e-6
PY
