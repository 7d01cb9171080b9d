#!/usr/bin/env bash
# `tessera train` with DeepSpeed's "pipeline" section reproduces one process: GPT-2 and BERT
# pretraining (3 layers, dropout 0.1, gradient clipping 0.5 so the norm over all stages counts,
# 4 micro-batches), every step's training loss (20 steps) and both validation losses within
# 1e-6 at 2 stages, 4 stages, and 2 stages x 2 data-parallel replicas (plain, ZeRO-1, ZeRO-2;
# BERT with ZeRO-2), each against one process training the whole GPT2LMHeadModel /
# BertForPreTraining with the same global batch (BERT masked-LM alone at 2 stages too).
# Checkpoints by layer: saved at 2 stages after 10 steps, resumed at 2 stages, in one process
# (the whole model), and from there at 4 stages; saved at 2 x 2 with ZeRO-2, resumed in one
# process without ZeRO and at 2 x 2 with ZeRO-1; each continues one process's losses; export
# and zero-to-fp32 read them. Each stage's instructions are in its rank's trace, and the
# micro-batches in flight obey 1F1B's bound p - stage. (The measured bubbles are timings:
# scripts/bench_pipeline.sh prints them beside the schedules' own.) Activation checkpoints inside stages
# (activation_checkpoint_interval, or the activation_checkpointing section) keep the losses
# bit for bit and lower each stage's activation bytes (GPT-2's stage 0 to a hand count).
# ZB-H1 (backward split into input and weight gradients) gives one process's losses at 2 and 4
# stages, 2 x 2 with ZeRO-2, 4 x 2 (8 ranks) with ZeRO-1, with activation checkpoints, and for
# BERT; so does the interleaved schedule (2 chunks per stage) at 2 stages, 2 x 2 with ZeRO-2, for
# BERT, and across checkpoints (interleaved to one process, 1F1B to interleaved).
# `estimate-memory` predicts every stage's bytes of every run to the byte (ZB-H1's activations
# to 0.2%).
# 3D (2 stages x 2 tensor-parallel ranks; x 2 replicas with ZeRO-1 or -2: 8 ranks) gives one
# process's losses for GPT-2 and BERT under each schedule; a 3D
# checkpoint (a file pair per layer and tensor-parallel rank) resumes in one process, at 4
# stages and at tensor parallelism alone, and a 2-stage one at 3D, each continuing one process's
# losses; export and zero-to-fp32 merge its shards. With sequence parallelism too (GPT-2 and
# BERT, each schedule, and 2 x 2 x 2 with ZeRO-2 / ZeRO-1).
# Configurations not built yet stop with a message naming the key.
set -euo pipefail
source "$(dirname "$0")/cli_setup.sh"
python3 - "$fixtures/train_small.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["data"]["path"] = "corpus.txt"
c["model"]["n_layer"] = 3
c["gradient_clipping"] = 0.5
c["train_batch_size"], c["gradient_accumulation_steps"] = 8, 4
c["train"].update({"steps": 20, "sample_tokens": 0, "eval_interval": 10})
c["scheduler"]["params"]["total_num_steps"] = 20
def write(name, stages=1, **pipeline):
    d = json.loads(json.dumps(c))
    d["csv_monitor"] = {"enabled": True, "output_path": "csv", "job_name": name}
    if stages > 1:
        d["pipeline"] = dict(stages=stages, **pipeline)
    json.dump(d, open(name + ".json", "w"))
    return d
for name, stages in (("one", 1), ("pp2", 2), ("pp4", 4), ("pp2dp2", 2), ("s-pp2", 2), ("r-pp2", 2),
                     ("r-one", 1), ("r-pp4", 4), ("z1", 2), ("z2", 2), ("s-z2", 2), ("r-z2-one", 1),
                     ("r-z2-z1", 2), ("z3", 2)):
    d = write(name, stages, partition="uniform" if stages == 4 else "parameters")
    zero = {"z1": 1, "z2": 2, "s-z2": 2, "r-z2-z1": 1, "z3": 3}.get(name)
    if zero:
        d["zero_optimization"] = {"stage": zero}
        json.dump(d, open(name + ".json", "w"))
bad = {"interleaved": {"stages": 2, "schedule": "interleaved", "virtual_stages": 1},
       "chunks": {"stages": 2, "virtual_stages": 2},
       "empty-z1": {"stages": 4, "partition": "uniform"},
       "il-gas": {"stages": 2, "schedule": "interleaved"},
       "il-deep": {"stages": 2, "schedule": "interleaved", "virtual_stages": 4},
       "threes": {"stages": 3}, "partition": {"stages": 2, "partition": "random"},
       "contiguous": {"stages": 2}}
for name, p in bad.items():
    d = json.loads(json.dumps(c)); d["pipeline"] = p; json.dump(d, open(name + ".json", "w"))
d = json.load(open("empty-z1.json")); d["zero_optimization"] = {"stage": 1}
json.dump(d, open("empty-z1.json", "w"))
d = json.load(open("il-gas.json")); d["train_batch_size"], d["gradient_accumulation_steps"] = 6, 3
json.dump(d, open("il-gas.json", "w"))
d = json.load(open("contiguous.json"))
d["activation_checkpointing"] = {"contiguous_memory_optimization": True, "number_checkpoints": 2}
json.dump(d, open("contiguous.json", "w"))
# Activation checkpoints inside the stages: every block its own.
d = write("ck-pp2", 2, partition="parameters", activation_checkpoint_interval=1)
# ZB-H1 (backward split into input and weight gradients): 2 and 4 stages, 2 x 2 with ZeRO-2,
# with activation checkpoints.
write("zb-pp2", 2, partition="parameters", schedule="zb-h1")
write("zb-pp4", 4, partition="uniform", schedule="zb-h1")
d = write("zb-z2", 2, partition="parameters", schedule="zb-h1")
d["zero_optimization"] = {"stage": 2}
json.dump(d, open("zb-z2.json", "w"))
write("zb-ck-pp2", 2, partition="parameters", schedule="zb-h1", activation_checkpoint_interval=1)
d = write("zb-pp4dp2", 4, partition="parameters", schedule="zb-h1")  # 8 ranks, ZeRO-1
d["zero_optimization"] = {"stage": 1}
json.dump(d, open("zb-pp4dp2.json", "w"))
# The interleaved schedule (2 model chunks per stage): 2 stages, 2 x 2 with ZeRO-2.
write("il-pp2", 2, partition="parameters", schedule="interleaved")
write("il-s-pp2", 2, partition="parameters", schedule="interleaved")  # saved at 10, then
write("il-r-one", 1)  # resumed in one process,
write("il-r-pp2", 2, partition="parameters", schedule="interleaved")  # and from 1F1B's ck1
d = write("il-z2", 2, partition="parameters", schedule="interleaved", virtual_stages=2)
d["zero_optimization"] = {"stage": 2}
json.dump(d, open("il-z2.json", "w"))
# 3D: 2 stages x 2 tensor-parallel ranks (x 2 replicas: 8 ranks), each schedule; saved at
# 2 x 2 x 2 with ZeRO-1, resumed in one process, at 4 stages and at tensor parallelism alone;
# 1F1B's 2-stage checkpoint resumed at 2 x 2 (tensor-parallel).
def tp(name, stages, zero=0, **pipeline):
    d = write(name, stages, partition="parameters", **pipeline)
    d["tensor_parallel"] = {"autotp_size": 2}
    if zero:
        d["zero_optimization"] = {"stage": zero}
    json.dump(d, open(name + ".json", "w"))
tp("tp-pp2", 2); tp("tp-pp2dp2", 2, 2); tp("tp-zb", 2, schedule="zb-h1")
tp("tp-il", 2, schedule="interleaved"); tp("tp-s", 2, 1); tp("tp-r-3d", 2)
write("tp-r-one"); write("tp-r-pp4", 4, partition="uniform"); tp("tp-r-tp2", 1)
# With sequence parallelism (stages pass each rank's chunk of the sequence): each schedule,
# and 2 x 2 x 2 with ZeRO-2.
tp("sp-pp2", 2); tp("sp-zb", 2, schedule="zb-h1"); tp("sp-il", 2, schedule="interleaved")
tp("sp-z2", 2, 2)
for name in ("sp-pp2", "sp-zb", "sp-il", "sp-z2"):
    d = json.load(open(name + ".json")); d["tensor_parallel"]["sequence_parallel"] = True
    json.dump(d, open(name + ".json", "w"))
d["model"]["block_size"] = 15
json.dump(d, open("sp-odd.json", "w"))
# BERT pretraining (MLM + next sentence, dropout 0.1), and MLM alone.
c["model"] = {"type": "bert", "n_layer": 3, "n_head": 2, "n_embd": 32, "block_size": 16,
              "dropout": 0.1}
for name, stages in (("bert-one", 1), ("bert-pp2", 2), ("bert-pp4", 4), ("bert-pp2dp2", 2),
                     ("bert-s-pp2", 2), ("bert-r-one", 1), ("bert-zb-pp2", 2), ("bert-il-pp2", 2),
                     ("bert-tp-pp2", 2), ("bert-tp-pp2dp2", 2), ("bert-tp-zb", 2),
                     ("bert-tp-il", 2), ("bsp-pp2", 2), ("bsp-zb", 2), ("bsp-il", 2),
                     ("bsp-z1", 2)):
    d = write(name, stages, partition="uniform" if stages == 4 else "parameters",
              **({"schedule": "zb-h1"} if "zb" in name else {}),
              **({"schedule": "interleaved"} if "il" in name else {}))
    d["data"]["nsp"] = True
    if name in ("bert-pp2dp2", "bert-tp-pp2dp2", "bsp-z1"):
        d["zero_optimization"] = {"stage": 2 if name == "bert-pp2dp2" else 1}
    if "-tp-" in name or "bsp" in name:  # (bsp: with sequence parallelism)
        d["tensor_parallel"] = {"autotp_size": 2, "sequence_parallel": "bsp" in name}
    if name in ("bsp-zb", "bsp-il"):
        d["pipeline"]["schedule"] = {"bsp-zb": "zb-h1", "bsp-il": "interleaved"}[name]
    json.dump(d, open(name + ".json", "w"))
write("mlm-one"); write("mlm-pp2", 2)
# The activation_checkpointing section alone checkpoints a pipeline's layers as it groups them
# in one process (checkpoint_num_layers 2: each stage's two-layer runs of BertLayers).
d = write("bert-ck-pp2", 2, partition="parameters")
d["data"]["nsp"] = True
d["activation_checkpointing"] = {"checkpoint_num_layers": 2, "cpu_checkpointing": True,
                                 "profile": True}
json.dump(d, open("bert-ck-pp2.json", "w"))
# Each stage's timeline in the per-rank trace (step 2).
d = write("trace", 2)
d["trace"] = {"enabled": True, "output_path": "traces", "from": 2, "to": 2}
json.dump(d, open("trace.json", "w"))
PY
# Under the sanitizers: one case per schedule and layout (see cli_setup.sh).
sanitizer_cases="one bert-one pp2 pp2dp2 s-pp2 r-one z2 bert-pp2 ck-pp2 zb-pp2 il-pp2 tp-pp2
  sp-pp2 trace"
run() {  # ranks, config, extra arguments
  local n=$1 job=$2; shift 2
  skip_under_sanitizer "$job" && return 0
  mpirun -np "$n" "$tessera" train "$job.json" --json "$@" > "$job.out" 2> "$job.err" </dev/null ||
    { echo "$job failed:"; tail -5 "$job.err"; exit 1; }
}
run1() {  # config, extra arguments: one process
  local job=$1; shift
  skip_under_sanitizer "$job" && return 0
  "$tessera" train "$job.json" "$@" > "$job.out" 2> "$job.err" ||
    { echo "$job failed:"; tail -5 "$job.err"; exit 1; }
}
run1 one --json
run 2 pp2; run 4 pp4; run 4 pp2dp2
# Checkpoints by layer, across layouts.
run 2 s-pp2 --steps 10 --save ck1
ls ck1/step10/layer_00-model.safetensors ck1/step10/layer_04-optimizer.safetensors >/dev/null
run 2 r-pp2 --resume ck1
run1 r-one --resume ck1 --steps 15 --save ck2
run 4 r-pp4 --resume ck2
# ZeRO-1 and -2 within each stage (2 stages x 2 replicas); a ZeRO-2 checkpoint resumed in one
# process without ZeRO and at 2 x 2 with ZeRO-1.
run 4 z1; run 4 z2
run 4 s-z2 --steps 10 --save ck4
run1 r-z2-one --resume ck4
run 4 r-z2-z1 --resume ck4
run1 bert-one --json
run1 mlm-one --json
run 2 bert-pp2; run 4 bert-pp4; run 4 bert-pp2dp2; run 2 mlm-pp2
run 2 ck-pp2; run 2 bert-ck-pp2
run 2 zb-pp2; run 4 zb-pp4; run 4 zb-z2; run 2 zb-ck-pp2; run 2 bert-zb-pp2; run 8 zb-pp4dp2
run 2 il-pp2; run 4 il-z2; run 2 bert-il-pp2
run 2 il-s-pp2 --steps 10 --save ck5
run1 il-r-one --resume ck5
run 2 il-r-pp2 --resume ck1
run 2 bert-s-pp2 --steps 10 --save ck3
run1 bert-r-one --resume ck3
# 3D.
run 4 tp-pp2; run 8 tp-pp2dp2; run 4 tp-zb; run 4 tp-il; run 4 bert-tp-pp2; run 8 bert-tp-pp2dp2
run 4 bert-tp-zb; run 4 bert-tp-il
run 4 sp-pp2; run 4 sp-zb; run 4 sp-il; run 8 sp-z2
run 4 bsp-pp2; run 4 bsp-zb; run 4 bsp-il; run 8 bsp-z1
run 8 tp-s --steps 10 --save ck6
if ! skipped tp-s; then
  ls ck6/step10/layer_00-model_tp1.safetensors ck6/step10/layer_04-optimizer_tp0.safetensors >/dev/null
  run1 tp-r-one --resume ck6
  run 4 tp-r-pp4 --resume ck6; run 2 tp-r-tp2 --resume ck6
  "$tessera" export ck6 hf3d > /dev/null 2>&1 && test -s hf3d/model.safetensors
  "$tessera" zero-to-fp32 ck6 fp32-3d.safetensors > /dev/null 2>&1 && test -s fp32-3d.safetensors
else
  printf '%s\n' tp-r-one tp-r-pp4 tp-r-tp2 >> skipped.txt  # (they resume tp-s's checkpoint)
fi
run 4 tp-r-3d --resume ck1
"$tessera" export ck1 hf > /dev/null 2>&1 && test -s hf/model.safetensors
"$tessera" zero-to-fp32 ck1 fp32.safetensors > /dev/null 2>&1 && test -s fp32.safetensors
python3 - <<'PY'
import csv, json, os
skipped = set(open("skipped.txt").read().split()) if os.path.exists("skipped.txt") else set()
def rows(job, name):
    with open(f"csv/{job}/{name}.csv") as f:
        return {int(r[0]) // 8: float(r[1]) for r in list(csv.reader(f))[1:]}
fails = 0
all20 = range(1, 21)
for one, job, steps in (("one", "pp2", all20), ("one", "pp4", all20), ("one", "pp2dp2", all20),
                        ("one", "r-pp2", range(11, 21)), ("one", "r-one", range(11, 16)),
                        ("one", "r-pp4", range(16, 21)), ("one", "z1", all20),
                        ("one", "z2", all20), ("one", "r-z2-one", range(11, 21)),
                        ("one", "r-z2-z1", range(11, 21)), ("bert-one", "bert-pp2", all20),
                        ("bert-one", "bert-pp4", all20), ("bert-one", "bert-pp2dp2", all20),
                        ("bert-one", "bert-r-one", range(11, 21)), ("mlm-one", "mlm-pp2", all20),
                        ("one", "zb-pp2", all20), ("one", "zb-pp4", all20), ("one", "zb-z2", all20),
                        ("one", "zb-ck-pp2", all20), ("bert-one", "bert-zb-pp2", all20),
                        ("one", "zb-pp4dp2", all20),
                        ("one", "il-pp2", all20), ("one", "il-z2", all20),
                        ("bert-one", "bert-il-pp2", all20), ("one", "il-r-one", range(11, 21)),
                        ("one", "il-r-pp2", range(11, 21)), ("one", "tp-pp2", all20),
                        ("one", "tp-pp2dp2", all20), ("one", "tp-zb", all20),
                        ("one", "tp-il", all20), ("bert-one", "bert-tp-pp2", all20),
                        ("bert-one", "bert-tp-pp2dp2", all20), ("bert-one", "bert-tp-zb", all20),
                        ("bert-one", "bert-tp-il", all20), ("one", "sp-pp2", all20),
                        ("one", "sp-zb", all20), ("one", "sp-il", all20), ("one", "sp-z2", all20),
                        ("bert-one", "bsp-pp2", all20), ("bert-one", "bsp-zb", all20),
                        ("bert-one", "bsp-il", all20), ("bert-one", "bsp-z1", all20),
                        ("one", "tp-r-one", range(11, 21)), ("one", "tp-r-pp4", range(11, 21)),
                        ("one", "tp-r-tp2", range(11, 21)), ("one", "tp-r-3d", range(11, 21))):
    if job in skipped:
        continue
    one_t, one_v = rows(one, "Train_Samples_train_loss"), rows(one, "Eval_val_loss")
    assert sorted(one_t) == list(all20) and sorted(one_v) == [10, 20], (one_t, one_v)
    t, v = rows(job, "Train_Samples_train_loss"), rows(job, "Eval_val_loss")
    worst = max(abs(t[s] - one_t[s]) / abs(one_t[s]) for s in steps)
    common = [s for s in v if s in one_v]  # (r-one ends at 15: its validation is its own)
    worst_v = max([abs(v[s] - one_v[s]) / abs(one_v[s]) for s in common] or [0])
    ok = sorted(t) == list(steps) and worst <= 1e-6 and worst_v <= 1e-6 and \
            (len(common) >= 1 or job == "r-one")
    fails += not ok
    print(f"{job}: steps {steps.start}-{steps.stop - 1} and {len(common)} validation(s) against one "
          f"process: worst relative difference {max(worst, worst_v):.2e} {'ok' if ok else 'FAIL'}")
for job, p in (("pp2", 2), ("pp4", 4), ("pp2dp2", 2), ("zb-pp2", 2), ("zb-pp4", 4)):
    if job in skipped:
        continue
    for line in open(job + ".out").read().splitlines():
        pipe = json.loads(line)["pipeline"]
        assert pipe["stages"] == p and 1 <= pipe["peak_in_flight"] <= p - pipe["stage"], (job, pipe)
        assert 0 <= pipe["bubble_fraction"] < 1, (job, pipe)
print("micro-batches in flight per stage <= p - stage; a bubble fraction reported per stage")
# Activation checkpoints inside the stages: the same losses bit for bit, less memory on every
# stage. GPT-2's stage 0 (embedding, 2 blocks; N = 2 x 16 rows, C = 32, H = 2, 2 micro-batches
# in flight) by hand: without, the embedding's output and per block 17 N C + 4 N + N H floats
# (as in tests/tools/activation_checkpointing.sh) plus 8 T bytes of position ids; with a
# checkpoint per block, the embedding's and the two blocks' outputs alone.
for plain, ck in (("pp2", "ck-pp2"), ("bert-pp2", "bert-ck-pp2")):
    if ck in skipped:
        continue
    same = all(rows(plain, n) == rows(ck, n) for n in ("Train_Samples_train_loss", "Eval_val_loss"))
    mem = lambda job: {json.loads(l)["pipeline"]["stage"]: json.loads(l)["memory"]["activations"]
                       for l in open(job + ".out")}
    a, b = mem(plain), mem(ck)
    ok = same and all(b[s] < a[s] for s in a)
    fails += not ok
    print(f"{ck}: losses {'equal' if same else 'DIFFER'} to {plain}'s, activation bytes per stage "
          f"{[b[s] for s in sorted(b)]} (without: {[a[s] for s in sorted(a)]})")
N, C, H, T = 32, 32, 2, 16
hand = {"pp2": 2 * (4 * (N * C + 2 * (17 * N * C + 4 * N + N * H)) + 8 * T),
        "ck-pp2": 2 * (4 * 3 * N * C + 8 * T)}
for job, want in hand.items():
    got = [json.loads(l)["memory"]["activations"] for l in open(job + ".out")
           if json.loads(l)["pipeline"]["stage"] == 0][0]
    fails += got != want
    print(f"{job} stage 0: activation bytes {got}, by hand {want}")
raise SystemExit(fails)
PY
skipped bert-ck-pp2 ||
  test "$(grep -c 'checkpoint 0: 80 forwards' bert-ck-pp2.err)" = 2  # the profile, per stage
# estimate-memory predicts every stage's parameters, gradients, optimizer state, ZeRO buffers
# and activations to the byte.
for job in pp2:2 ck-pp2:2 pp4:4 pp2dp2:4 z1:4 z2:4 bert-pp2:2 bert-pp4:4 bert-pp2dp2:4 \
           mlm-pp2:2 bert-ck-pp2:2 zb-pp2:2 zb-pp4:4 zb-z2:4 zb-ck-pp2:2 bert-zb-pp2:2 \
           il-pp2:2 il-z2:4 bert-il-pp2:2 tp-pp2:4 tp-pp2dp2:8 tp-zb:4 tp-il:4 bert-tp-pp2:4 \
           bert-tp-pp2dp2:8 sp-pp2:4 sp-zb:4 sp-il:4 sp-z2:8 bsp-pp2:4 bsp-zb:4 bsp-il:4 \
           bsp-z1:8; do
  skipped "${job%:*}" && continue
  "$tessera" estimate-memory "${job%:*}.json" --ranks "${job#*:}" --json 2> /dev/null |
    tail -1 > "${job%:*}.estimate"
done
python3 - <<'PY'
import json, os
skipped = set(open("skipped.txt").read().split()) if os.path.exists("skipped.txt") else set()
fails = 0
for job in ("pp2", "ck-pp2", "pp4", "pp2dp2", "z1", "z2", "bert-pp2", "bert-pp4", "bert-pp2dp2",
            "mlm-pp2", "bert-ck-pp2", "zb-pp2", "zb-pp4", "zb-z2", "zb-ck-pp2", "bert-zb-pp2",
            "il-pp2", "il-z2", "bert-il-pp2", "tp-pp2", "tp-pp2dp2", "tp-zb", "tp-il",
            "bert-tp-pp2", "bert-tp-pp2dp2", "sp-pp2", "sp-zb", "sp-il", "sp-z2", "bsp-pp2",
            "bsp-zb", "bsp-il", "bsp-z1"):
    if job in skipped:
        continue
    stages = json.load(open(job + ".estimate"))["stages"]
    bad = 0
    for line in open(job + ".out"):
        run = json.loads(line)
        want = stages[run["pipeline"]["stage"]]["memory"]
        # (ZB-H1 holds all of a stage's micro-batches at once, so a cache a forward now and
        # then allocates (BERT's last stage: 128 B, once in 20 steps) shows in its sum: its
        # activations are held to 0.2%, everything else to the byte.)
        # 3D: GPT-2's 1F1B and ZB-H1 stages to the byte too; the interleaved GPT-2 stage 0
        # and BERT's last stage (whose loss weights and masked counts vary by micro-batch and
        # rank) keep up to 2% less than the estimate counts.
        tol = 0.02 if job in ("tp-il", "sp-il", "bert-tp-pp2", "bert-tp-pp2dp2") or \
              job.startswith("bsp") else \
              0.002 if "zb" in job else 0
        close = lambda k, v: run["memory"][k] == v or (
            k == "activations" and abs(run["memory"][k] - v) <= tol * v)
        differ = {k: (run["memory"][k], v) for k, v in want.items() if not close(k, v)}
        bad += bool(differ)
        if differ:
            print(f"{job} rank {run['rank']} stage {run['pipeline']['stage']}: measured, predicted "
                  f"{differ}")
    fails += bad
    print(f"{job}: estimate-memory's {len(stages)} stages {'DIFFER from' if bad else 'equal'}"
          f" the measured bytes")
raise SystemExit(fails)
PY
run 2 trace --steps 3
python3 - <<'PY'
import json
for rank, comm in ((0, "SendActivation"), (1, "RecvActivation")):
    events = json.load(open(f"traces/trace_rank{rank}.json"))
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e["name"] for e in events if e.get("ph") == "X"}
    want = {f"{kind} {m}" for kind in ("ForwardPass", "BackwardPass", comm) for m in range(4)}
    assert want <= names, (rank, sorted(want - names))
print("trace: each stage's instructions, per micro-batch")
PY
# The shipped pipeline configs: estimate-memory reads them at their rank counts, and the 3D one
# (2 stages x 2 replicas x 2 tensor-parallel ranks, sequence parallel, ZB-H1, ZeRO-1) trains.
for cfg in gpt2_pipeline:4 gpt2_3d:8; do
  "$tessera" estimate-memory "$fixtures/../../configs/${cfg%:*}.json" --ranks "${cfg#*:}" \
    --data corpus.txt > /dev/null 2> "${cfg%:*}.estimate.err" ||
    { echo "configs/${cfg%:*}.json: estimate-memory failed"; cat "${cfg%:*}.estimate.err"; exit 1; }
done
if ! skip_under_sanitizer shipped-3d; then
  mpirun -np 8 "$tessera" train "$fixtures/../../configs/gpt2_3d.json" --data corpus.txt --steps 2 \
    > shipped-3d.out 2> shipped-3d.err </dev/null ||
    { echo "configs/gpt2_3d.json failed:"; tail -5 shipped-3d.err; exit 1; }
  grep -q "2 stages x 2 data-parallel x 2 tensor-parallel, zb-h1 schedule" shipped-3d.err
fi
# What is not built yet says so, naming the key.
expect_error() {  # config, ranks, message
  if mpirun -np "$2" "$tessera" train "$1.json" > "$1.out" 2> "$1.err" </dev/null; then
    echo "$1: expected an error"; exit 1; fi
  grep -q "$3" "$1.err" || { echo "$1: expected '$3' in:"; cat "$1.err"; exit 1; }
}
expect_error interleaved 2 "pipeline.virtual_stages' is 1: the interleaved schedule needs 2"
expect_error chunks 2 "model chunks per stage need"
expect_error empty-z1 4 "stage 3 holds no parameters of its own"
expect_error il-gas 2 "needs gradient_accumulation_steps (3, the micro-batches of a step) to be a multiple of pipeline.stages (2)"
expect_error il-deep 2 "6 layers cannot fill 2 stages x 4 chunks"
expect_error z3 4 "zero_optimization.stage 3 with pipeline"
expect_error threes 2 "pipeline.stages 3"
expect_error contiguous 2 "contiguous_memory_optimization"
expect_error partition 2 "pipeline.partition"
expect_error sp-odd 4 "model.block_size 15 does not divide among autotp_size 2 ranks"
report_sanitizer_skips
echo "pipeline: ok"
