#!/usr/bin/env bash
# Distributed training as users launch it: mpirun -np N tessera train. Checks, at N = 2 and 4:
#  - plain DP, ZeRO-1/2/3 and ZeRO-2 with CPU offload: every one of 20 steps' losses equals
#    the single-process run with the same global batch to 1e-6 (relative); so does plain DP
#    with dropout 0.1 (each rank applies its slice of the global batch's masks), and BERT
#    (masked LM + NSP: each rank's loss weighted by its share of the masked tokens);
#  - per-rank model-state bytes: equal to `tessera estimate-memory`, and to the ZeRO paper's
#    formulas within 5% plus the gradient partition stage 1 keeps;
#  - communication per step (comms logger) against 2(N-1)/N * Psi * 4 bytes (ZeRO-3: 1.5x);
#  - a checkpoint saved by 4 ranks at ZeRO-3 resumes at 4 ranks, at 2 ranks (ZeRO-1) and on 1 process,
#    and zero-to-fp32 gives the same weights from either;
#  - a killed rank ends the job; a stopped rank makes the others time out naming the op.
set -euo pipefail
tessera="$1"; fixtures="$2"
work="$(mktemp -d)"; trap 'pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache" OMP_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cp "$fixtures/../../README.md" "$work/corpus.txt"
mpi() { local n=$1; shift; mpirun -np "$n" "$@"; }

python3 - "$fixtures/train_dist.json" "$work" <<'PY'
import json, sys
base = json.load(open(sys.argv[1])); work = sys.argv[2]
variants = {"dp": {"stage": 0}, "z1": {"stage": 1}, "z2": {"stage": 2}, "z3": {"stage": 3},
            "z2off": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}, "dpdrop": {"stage": 0},
            "bert": {"stage": 0}}
for name, z in variants.items():
    c = json.loads(json.dumps(base))
    c["zero_optimization"].update(z)
    if name == "dpdrop":
        c["model"]["dropout"] = 0.1
    if name == "bert":  # masked LM + NSP: ranks hold different numbers of masked tokens
        c["model"] = {"type": "bert", "n_layer": 2, "n_head": 2, "n_embd": 32,
                      "intermediate_size": 64, "block_size": 16, "dropout": 0.0}
        c["data"] = {"tokenizer": "char", "mask_prob": 0.15, "nsp": True}
    c["csv_monitor"]["output_path"] = work + "/csv"
    json.dump(c, open(f"{work}/{name}.json", "w"))
PY

run() {  # name ranks -> per-rank json lines in $work/<name>-<ranks>.jsonl, losses in csv
  local name=$1 n=$2 cfg="$work/$1.json"
  sed -i "s#\"job_name\": \"[^\"]*\"#\"job_name\": \"$name-$n\"#" "$cfg"
  if [ "$n" = 1 ]; then "$tessera" train "$cfg" --data "$work/corpus.txt" --json 2>"$work/$name-$n.err" | tail -1 > "$work/$name-$n.jsonl"
  else mpi "$n" "$tessera" train "$cfg" --data "$work/corpus.txt" --json 2>"$work/$name-$n.err" | grep '^{' > "$work/$name-$n.jsonl"; fi
  "$tessera" estimate-memory "$cfg" --ranks "$n" --data "$work/corpus.txt" --json 2>/dev/null | tail -1 > "$work/$name-$n.est"
}
run dp 1
run dpdrop 1
run bert 1
for n in 2 4; do for v in dp z1 z2 z3 z2off dpdrop bert; do run $v $n; done; done

python3 - "$work" <<'PY'
import csv, json, sys
work = sys.argv[1]
def losses(tag):
    with open(f"{work}/csv/{tag}/Train_Samples_train_loss.csv") as f:
        return [float(r["Train/Samples/train_loss"]) for r in csv.DictReader(f)]
refs = {"dp": losses("dp-1"), "dpdrop": losses("dpdrop-1"), "bert": losses("bert-1")}
assert len(refs["dp"]) == 20 and refs["dp"] != refs["dpdrop"], refs
fails = 0
for n in (2, 4):
    dp_bytes = None
    for v in ("dp", "z1", "z2", "z3", "z2off", "dpdrop", "bert"):
        ref = refs.get(v, refs["dp"])
        got = losses(f"{v}-{n}")
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
        ok = len(got) == 20 and worst <= 1e-6
        fails += not ok
        print(f"{v:6s} N={n}: 20 losses, worst relative difference {worst:.2e} {'ok' if ok else 'FAIL'}")
        lines = [json.loads(l) for l in open(f"{work}/{v}-{n}.jsonl")]
        assert sorted(l["rank"] for l in lines) == list(range(n)), lines
        estimate = json.load(open(f"{work}/{v}-{n}.est"))
        est, psi = estimate["memory"], estimate["num_parameters"]
        stage = lines[0]["zero_stage"]
        # float32 Adam: (params, grads, optimizer) bytes per rank by the ZeRO paper's reasoning
        paper = {0: (4*psi, 4*psi, 8*psi), 1: (4*psi, 4*psi, 12*psi/n),
                 2: (4*psi, 4*psi/n, 12*psi/n), 3: (4*psi/n, 4*psi/n, 8*psi/n)}[stage]
        for l in lines:
            m = l["memory"]
            same = all(m[k] == est[k] for k in ("params", "grads", "optimizer"))
            total = m["params"] + m["grads"] + m["optimizer"]
            allowance = 4 * psi / n if stage == 1 else 0  # stage 1's gradient partition
            within = abs(total - sum(paper)) <= 0.05 * sum(paper) + allowance
            fails += not (same and within)
            if l["rank"] == 0:
                print(f"       memory rank 0: {m} estimate {'equal' if same else 'DIFFERS'}; "
                      f"paper {sum(paper):.0f} B, measured {total} B ({total/sum(paper):.3f}x) "
                      f"{'ok' if within else 'FAIL'}")
        comms = lines[0]["comms"]
        step_bytes = sum(c["bus_bytes"] for op, c in comms.items() if op != "broadcast") / 20
        theory = 2 * (n - 1) / n * psi * 4 * (1.5 if stage == 3 else 1.0)
        ratio = step_bytes / theory
        ok = abs(ratio - 1) <= 0.02
        fails += not ok
        print(f"       comm/step {step_bytes:.0f} B, theory {theory:.0f} B, ratio {ratio:.4f} {'ok' if ok else 'FAIL'}")
sys.exit(1 if fails else 0)
PY

# Resharding: ZeRO-3 on 4 ranks saves at step 10; ZeRO-1 on 2 ranks and one process resume.
mpi 4 "$tessera" train "$work/z3.json" --data "$work/corpus.txt" --steps 10 --save "$work/ck4" --json >/dev/null 2>"$work/save4.err"
for f in engine.json config.json zero_rank0.safetensors zero_rank3.safetensors; do test -f "$work/ck4/step10/$f"; done
resumed2=$(mpi 2 "$tessera" train "$work/z1.json" --data "$work/corpus.txt" --resume "$work/ck4" --json 2>"$work/res2.err" | grep '"rank": 0')
straight=$(cat "$work/dp-1.jsonl")
python3 - "$straight" "$resumed2" <<'PY'
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
rel = abs(a["train_loss"] - b["train_loss"]) / a["train_loss"]
print(f"resume 4 ranks (ZeRO-3) -> 2 ranks (ZeRO-1): step {b['step']} loss {b['train_loss']} vs {a['train_loss']} straight, rel {rel:.1e}")
assert b["step"] == 20 and rel <= 1e-6
PY
grep -q "resumed at step 10" "$work/res2.err"
# At the size it was saved with, each rank reads only its own shard file.
resumed4=$(mpi 4 "$tessera" train "$work/z3.json" --data "$work/corpus.txt" --resume "$work/ck4" --json 2>/dev/null | grep '"rank": 0')
python3 - "$straight" "$resumed4" <<'PY'
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
rel = abs(a["train_loss"] - b["train_loss"]) / a["train_loss"]
print(f"resume 4 ranks (ZeRO-3) -> 4 ranks (ZeRO-3): step {b['step']} loss {b['train_loss']} vs {a['train_loss']} straight, rel {rel:.1e}")
assert b["step"] == 20 and rel <= 1e-6
PY
"$tessera" train "$work/dp.json" --data "$work/corpus.txt" --resume "$work/ck4" --steps 10 --save "$work/ck1" >/dev/null 2>&1
"$tessera" zero-to-fp32 "$work/ck4" "$work/a.safetensors" 2>/dev/null
"$tessera" zero-to-fp32 "$work/ck1" "$work/b.safetensors" 2>/dev/null
cmp "$work/a.safetensors" "$work/b.safetensors"
echo "zero-to-fp32: the 4-rank ZeRO-3 shards and the 1-process checkpoint give identical files"

# Failure handling: a killed rank ends the job; a stopped one makes the others time out.
python3 -c "
import json,sys; c=json.load(open('$work/z2.json')); c['distributed']={'timeout_s': 5}; c['train']['steps']=10**6
json.dump(c, open('$work/long.json','w'))"
rank_pid() { for p in $(pgrep -f "$work/long.json" || true); do
  if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo $p; fi; done; }
wait_rank() { for _ in $(seq 100); do p=$(rank_pid 1); [ -n "$p" ] && grep -q "^step" "$work/$1" 2>/dev/null && return 0; sleep 0.2; done; return 1; }
mpi 2 "$tessera" train "$work/long.json" --data "$work/corpus.txt" >"$work/kill.out" 2>&1 & job=$!
wait_rank kill.out; kill -9 "$(rank_pid 1)"; t0=$(date +%s)
if wait $job; then echo "job survived a killed rank"; exit 1; fi
echo "killed rank 1: the job ended in $(( $(date +%s) - t0 )) s"
mpi 2 "$tessera" train "$work/long.json" --data "$work/corpus.txt" >"$work/stop.out" 2>&1 & job=$!
wait_rank stop.out; p=$(rank_pid 1); kill -STOP "$p"; t0=$(date +%s)
if wait $job; then echo "job survived a stuck rank"; exit 1; fi
kill -9 "$p" 2>/dev/null || true
grep "did not finish within 5 s" "$work/stop.out"
echo "stopped rank 1: the job ended in $(( $(date +%s) - t0 )) s"
echo ok
