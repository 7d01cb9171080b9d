#!/usr/bin/env bash
# `tessera launch` (DeepSpeed's launcher over mpirun): a local hostfile ("localhost slots=2")
# runs the 2-rank job `mpirun -np 2` runs, to the same losses bit for bit; --dry_run shows the
# mpirun app contexts --include/--exclude/--num_gpus make; bad hostfiles and options are errors
# naming the line or the option.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/cli_setup.sh"
set +e
source "$here/expect_error.sh"
set -e
python3 - "$fixtures/train_small.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["data"]["path"] = "corpus.txt"
c["train"].update({"steps": 6, "sample_tokens": 0})
json.dump(c, open("job.json", "w"))
PY
echo "localhost slots=2" > hostfile
loss() { grep '"rank":0' "$1" | python3 -c 'import json,sys; l=json.loads(sys.stdin.read()); print(l["train_loss"], l["val_loss"])'; }
mpirun -np 2 "$tessera" train job.json --json > mpirun.out 2> mpirun.err
"$tessera" launch --hostfile hostfile -- tessera train job.json --json > launch.out 2> launch.err ||
  { echo "launch failed:"; tail -5 launch.err; exit 1; }
grep -q "^launch: mpirun .*-np 2 -H localhost:2 " launch.err
[ "$(loss mpirun.out)" = "$(loss launch.out)" ] ||
  { echo "launch: $(loss launch.out), mpirun -np 2: $(loss mpirun.out)"; exit 1; }
echo "ok   launch = mpirun -np 2 ($(loss launch.out))"
printf 'worker-0 slots=4\nworker-1 slots=2 # comment\n' > two
dry=$("$tessera" launch --hostfile two --include "worker-0:1,3@worker-1" --master_port 6000 --dry_run -- tessera train job.json)
want="mpirun -x MASTER_ADDR=worker-0 -x MASTER_PORT=6000 -np 2 -H worker-0:2 -x CUDA_VISIBLE_DEVICES=1,3 $tessera train job.json : -np 2 -H worker-1:2 -x CUDA_VISIBLE_DEVICES=0,1 $tessera train job.json"
[ "$dry" = "$want" ] || { echo "dry run: $dry"; echo "expected:  $want"; exit 1; }
dry=$("$tessera" launch --hostfile two --num_nodes 1 --num_gpus 3 --launcher slurm --dry_run -- tessera train job.json)
[ "$dry" = "srun --mpi=pmix --nodelist=worker-0 --nodes=1 --ntasks=3 --ntasks-per-node=3 --kill-on-bad-exit=1 --export=ALL,MASTER_ADDR=worker-0,MASTER_PORT=29500,CUDA_VISIBLE_DEVICES=0,1,2 $tessera train job.json" ] ||
  { echo "slurm dry run: $dry"; exit 1; }
echo "ok   --dry_run: app contexts per host, srun under slurm"
set +e  # (expect runs commands that fail)
printf 'worker-0 slots=4\nworker-1 four\n' > bad
printf 'worker-0 slots=4\nworker-0 slots=2\n' > twice
expect bad-line "bad:2: expected \"HOSTNAME slots=N\"" "$tessera" launch --hostfile bad -- tessera train job.json
expect twice "twice:2: host 'worker-0' appears twice" "$tessera" launch --hostfile twice -- tessera train job.json
expect missing "cannot read the hostfile 'nope'" "$tessera" launch --hostfile nope -- tessera train job.json
expect no-program "no program to run" "$tessera" launch --hostfile two
expect unknown-host "host 'worker-7' is not in the hostfile" "$tessera" launch --hostfile two --include worker-7 -- tessera train job.json
expect both "cannot be used together" "$tessera" launch --hostfile two --include worker-0 --exclude worker-1 -- x
expect counts "cannot be combined with --include" "$tessera" launch --hostfile two --include worker-0 --num_gpus 1 -- x
expect gpus "--num_gpus 3: host 'worker-1' has 2 slots" "$tessera" launch --hostfile two --num_gpus 3 -- x
expect nodes "--num_nodes 5: the hostfile two has 2 hosts" "$tessera" launch --hostfile two --num_nodes 5 -- x
expect launcher "--launcher 'pdsh'" "$tessera" launch --hostfile two --launcher pdsh -- x
expect stray "the program to run goes after --" "$tessera" launch --hostfile two tessera train job.json
[ "$fails" = 0 ] || exit 1
echo ok
