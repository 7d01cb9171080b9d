#!/usr/bin/env bash
# GPT-2 with MoE layers from the "moe" section (DeepSpeed's MoE: parallel/moe.h), from configs:
# N ranks with expert parallelism reproduce one process that gates its batch in N groups
# (gating_groups), top-2 with second-expert sampling and dropped tokens at ep_size 2 and 4 on 4
# ranks and at 2 ranks; top-1 with RSample, PR-MoE's residual and a pyramid of expert counts;
# no token dropping; ZeRO-2 without expert parallelism; the training loss, the aux loss and
# the validation loss to 1e-6. A checkpoint resumes across ep_size 2 -> 1 -> 4 with the
# uninterrupted run's losses. The all-to-all volume equals the formula (4 exchanges of
# E x C x n_embd float32 per MoE layer and step, C = ceil(k x capacity_factor x tokens / E)),
# the experts' gradients go over the expert-data-parallel group only, the monitors get
# moe_aux_loss, each layer's dropped fraction and expert loads (which sum to 1). The all-to-all
# bytes are also counted at the MPI calls ($3: tests/tools/mpi_byte_counter.cpp, preloaded).
# Layouts that do not fit are errors naming the key before any work.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
counter="$(realpath "$3")"
source "$here/cli_setup.sh"
config() {  # name moe-json [python-edit]
  python3 - "$fixtures/train_dist.json" "$1.json" "$1" "$2" "${3:-}" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["train"].update({"steps": 20, "eval_iters": 2})
c["csv_monitor"] = {"enabled": True, "output_path": "monitors", "job_name": sys.argv[3]}
c["moe"] = json.loads(sys.argv[4])
c["data"]["path"] = "corpus.txt"
exec(sys.argv[5])
json.dump(c, open(sys.argv[2], "w"))
PY
}
run() {  # out ranks config [args...]: rank 0's --json line in out.res
  # (Each rank's output in a file of its own: ranks' long lines interleave on a shared pipe.)
  local out="$1" n="$2" cfg="$3"; shift 3
  rm -rf "ranks_$out"
  mpirun -np "$n" --output-filename "ranks_$out" "$tessera" train "$cfg.json" --data corpus.txt \
    --json "$@" >/dev/null 2>"$out.log" ||
    { echo "FAIL $out: exit $?"; grep "error" "$out.log" | head -3; exit 1; }
  grep '^{' "ranks_$out/1/rank.0/stdout" > "$out.res"
}
top2='{"num_experts": 4, "k": 2, "capacity_factor": 0.75'
config g4 "$top2, \"gating_groups\": 4}"
config g2 "$top2, \"gating_groups\": 2}"
config ep4 "$top2, \"ep_size\": 4}"
config ep2 "$top2, \"ep_size\": 2}"
config ep1 "$top2}"
top1='{"num_experts": [2, 4], "expert_interval": 1, "k": 1, "capacity_factor": 0.8, "noisy_gate_policy": "RSample", "use_residual": true'
config top1g2 "$top1, \"gating_groups\": 2}"
config top1ep2 "$top1, \"ep_size\": 2}"
config nodropg2 "$top2, \"drop_tokens\": false, \"gating_groups\": 2}"
config nodropep2 "$top2, \"drop_tokens\": false, \"ep_size\": 2}"
config zero2 "$top2}" 'c["zero_optimization"]["stage"] = 2'
# ZeRO with expert parallelism: experts partitioned over their replicas, the rest over all.
config z1ep2 "$top2, \"ep_size\": 2}" 'c["zero_optimization"]["stage"] = 1'
config z2ep2 "$top2, \"ep_size\": 2}" 'c["zero_optimization"]["stage"] = 2'
config z1ep4 "$top2, \"ep_size\": 4}" 'c["zero_optimization"]["stage"] = 1'
# BERT (masked LM + next sentence, dropout 0.1): layer 1's feed-forward part as a MoE layer.
bert='c["model"] = {"type": "bert", "n_layer": 2, "n_head": 2, "n_embd": 32, "intermediate_size": 64, "block_size": 16, "dropout": 0.1}; c["data"].update({"mask_prob": 0.15, "nsp": True})'
config bertg2 "$top2, \"gating_groups\": 2}" "$bert"
config bertep2 "$top2, \"ep_size\": 2}" "$bert"
# Tensor parallelism for the dense parts (each tensor-parallel rank runs the whole experts).
tp='c["tensor_parallel"] = {"autotp_size": 2}'
config tp2 "$top2}" "$tp"
config tp2ep2 "$top2, \"ep_size\": 2}" "$tp"
config tp2z1ep2 "$top2, \"ep_size\": 2}" "$tp; c['zero_optimization']['stage'] = 1"
config berttp2ep2 "$top2, \"ep_size\": 2}" "$bert; $tp"
# Activation checkpointing: the layers' aux loss comes out of each checkpoint with its gradient.
ac='c["activation_checkpointing"] = {"partition_activations": False}'
config acep2 "$top2, \"ep_size\": 2}" "$ac"
config bertacep2 "$top2, \"ep_size\": 2}" "$bert; $ac"
# Every buffer full (2 experts, top-2, capacity factor 1: each token in both): estimate-memory's
# MoE activation bytes are exact, at ep_size 2 and in bf16 with Jitter and PR-MoE's residual.
config full2 '{"num_experts": 2, "k": 2, "capacity_factor": 1.0, "ep_size": 2}'
config fullbf '{"num_experts": 2, "k": 2, "capacity_factor": 1.0, "noisy_gate_policy": "Jitter", "use_residual": true}' 'c["bf16"] = {"enabled": True}'
run full2 2 full2
run fullbf 1 fullbf
run g4 1 g4
run ep4 4 ep4
run ep2x2 4 ep2
run g2 1 g2
run ep2 2 ep2
run top1g2 1 top1g2
run top1ep2 2 top1ep2
run nodropg2 1 nodropg2
run nodropep2 2 nodropep2
run ep1x2 2 ep1
run zero2 2 zero2
run z1ep2x2 4 z1ep2
run z2ep2x2 4 z2ep2
run z2ep2 2 z2ep2
run g1 1 ep1
run tp2 2 tp2
run tp2ep2 4 tp2ep2
run tp2z1ep2 4 tp2z1ep2
run berttp2ep2 4 berttp2ep2
run acep2 2 acep2
run bertacep2 2 bertacep2
run bertg2 1 bertg2
run bertep2 2 bertep2 --save bertck
mkdir -p "$work/mpi"
mpirun -np 4 -x LD_PRELOAD="$counter" -x TESSERA_MPI_COUNT_DIR="$work/mpi" "$tessera" train ep2.json \
  --data corpus.txt --json > counted.out 2>&1 || { echo "FAIL counted run"; tail -3 counted.out; exit 1; }
run save 4 ep2 --steps 10 --save ck
run mid 4 ep1 --steps 15 --save ck --resume ck
run resumed 4 ep4 --resume ck
run zsave 4 z2ep2 --steps 10 --save zck
run zmid 4 ep2 --steps 15 --save zck --resume zck
run zresumed 4 z1ep4 --resume zck
run tpsave 4 tp2ep2 --steps 10 --save tpck
run tpresumed 2 ep2 --resume tpck
python3 - <<'PY'
import csv, json, os
def line(name): return json.loads(open(name + ".res").read().splitlines()[-1])
def close(a, b, name, tol=1e-6):
    assert abs(a - b) <= tol * abs(b), f"{name}: {a} vs {b}"
pairs = [("ep4", "g4"), ("ep2x2", "g4"), ("ep2", "g2"), ("top1ep2", "top1g2"),
         ("nodropep2", "nodropg2"), ("zero2", "ep1x2"), ("bertep2", "bertg2"),
         ("z1ep2x2", "g4"), ("z2ep2x2", "g4"), ("z2ep2", "g2"), ("tp2", "g1"),
         ("tp2ep2", "g2"), ("tp2z1ep2", "g2"), ("berttp2ep2", "bertg2"), ("acep2", "g2"),
         ("bertacep2", "bertg2")]
for got, want in pairs:
    g, w = line(got), line(want)
    close(g["train_loss"], w["train_loss"], f"{got} train_loss")
    # After 20 Adam updates the weights differ by float32 rounding (sums taken over other
    # groupings of the tokens), which the aux loss (a product of two means over the gates) and
    # the final evaluation (where it may move a token whose two best experts nearly tie) show
    # at the 1e-6 level; tests/parallel/test_moe.cpp holds every step to 1e-6 over 8 steps.
    close(g["moe_aux_loss"], w["moe_aux_loss"], f"{got} moe_aux_loss", 1e-5)
    close(g["val_loss"], w["val_loss"], f"{got} val_loss", 1e-5)
print("N ranks reproduce one process:", ", ".join(f"{a} = {b}" for a, b in pairs))
assert line("g4")["train_loss"] != line("g2")["train_loss"]  # the gating groups matter
# BERT's MoE layer holds its experts under the dense layer's names, and no dense layer.
def names(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return set(json.loads(f.read(n))) - {"__metadata__"}
ck = "bertck/" + open("bertck/latest").read().strip()
dense, experts = names(f"{ck}/model.safetensors"), names(f"{ck}/moe_experts_1.safetensors")
layer = "bert.encoder.layer.1."
assert layer + "moe.deepspeed_moe.gate.wg.weight" in dense, sorted(dense)
assert layer + "output.LayerNorm.weight" in dense and layer + "output.dense.weight" not in dense
assert not any(n.startswith(layer + "intermediate") for n in dense), sorted(dense)
assert "bert.encoder.layer.0.intermediate.dense.weight" in dense
assert experts == {layer + f"moe.deepspeed_moe.experts.deepspeed_experts.{e}.{p}.dense.{w}"
                   for e in (2, 3) for p in ("intermediate", "output") for w in ("weight", "bias")}, experts
assert line("bertep2")["moe_aux_loss"] > 0
# 2 -> 1 -> 4 experts' ranks, resumed from checkpoints: the uninterrupted run's losses.
assert line("save")["step"] == 10 and line("mid")["step"] == 15 and line("resumed")["step"] == 20
close(line("resumed")["train_loss"], line("ep2x2")["train_loss"], "resumed across ep_size")
close(line("resumed")["moe_aux_loss"], line("ep2x2")["moe_aux_loss"], "resumed aux loss")
# The same across ZeRO stages 2 -> 0 -> 1 with ep_size 2 -> 2 -> 4.
assert line("zresumed")["step"] == 20
close(line("zresumed")["train_loss"], line("ep2x2")["train_loss"], "ZeRO resumed across ep_size")
# From tensor parallel 2 x ep_size 2 (4 ranks) to ep_size 2 alone (2 ranks).
assert line("tpresumed")["step"] == 20
close(line("tpresumed")["train_loss"], line("g2")["train_loss"], "resumed without TP")
# All-to-all volume: micro-batch 2 x 16 tokens a rank, E 4, k 2, capacity factor 0.75:
# C = ceil(32 / 4 x 1.5) = 12; 4 exchanges (2 forward, 2 backward) a step of E x C x 32 floats.
a2a = line("ep2x2")["ep_comms"]["all_to_all"]
assert a2a["calls"] == 20 * 4, a2a
assert a2a["message_bytes"] == 20 * 4 * 4 * 12 * 32 * 4, a2a
a2a = line("ep4")["ep_comms"]["all_to_all"]
assert a2a["message_bytes"] == 20 * 4 * 4 * 12 * 32 * 4, a2a
# The experts' gradients (2 of 4 experts a rank: 2 x (32x128 + 128 + 128x32 + 32) floats... no
# biases: bias false) over the 2-rank expert-data-parallel group, once a step; none over the
# expert-parallel group, whose other collectives are each forward's agreement on the capacity
# and the filled slots (an all-gather of 1 + E int64 a rank) and the experts' squares of the
# gradient norm (8 bytes a step).
experts = 2 * (32 * 128 + 128 * 32) * 4
dp = line("ep2x2")["expert_dp_comms"]["all_reduce"]
assert dp["calls"] == 20 and dp["message_bytes"] == 20 * experts, dp
ep = line("ep2x2")["ep_comms"]
assert set(ep) == {"all_to_all", "all_gather", "all_reduce"}, ep
assert ep["all_gather"]["calls"] == 20, ep  # gathered: 2 ranks x (1 + 4) int64
assert ep["all_gather"]["message_bytes"] == 20 * 2 * 5 * 8, ep
assert ep["all_reduce"] == {**ep["all_reduce"], "calls": 20, "message_bytes": 20 * 8}, ep  # norm
# At the MPI calls: the 80 training exchanges and the final evaluation's 2 forwards x 2 at the
# evaluation capacity (eval_capacity_factor 1: C = ceil(32 / 4 x 2) = 16).
for r in range(4):
    mpi = json.load(open(f"mpi/rank{r}.json"))["all_to_all"]
    assert mpi == {"calls": 84, "bytes": 80 * 4 * 12 * 32 * 4 + 4 * 4 * 16 * 32 * 4}, (r, mpi)
world = line("ep2x2")["comms"]["all_reduce"]
dense = line("ep1x2")["comms"]["all_reduce"]["message_bytes"]
assert world["message_bytes"] == dense - 20 * 2 * experts, (world, dense)
print("all-to-all bytes and the experts' all-reduce over their replicas as derived")
d = "monitors/g4"  # (a job trained once: the resumed runs share ep2's)
def values(name): return [float(r[-1]) for r in list(csv.reader(open(f"{d}/{name}.csv")))[1:]]
assert len(values("Train_Samples_moe_aux_loss")) == 20
layer = "Train_Samples_moe_transformer.h.1.mlp_"
loads = [values(layer + f"expert_{e}_load") for e in range(4)]
for step in range(20):
    close(sum(l[step] for l in loads), 1.0, "expert loads")
drops = values(layer + "dropped_fraction")
assert all(0 <= x < 1 for x in drops) and max(drops) > 0, drops
print("monitors: moe_aux_loss, dropped fraction, expert loads")
PY
# estimate-memory builds a rank's share of the experts: its parameters and optimizer state are
# the run's to the byte. Its MoE activation bytes count every route as kept: the run's to the
# byte where every buffer is full, an upper bound where routes were dropped (ep2: capacity
# factor 0.75, so the bound is the full buffers: within 2% here).
"$tessera" estimate-memory ep2.json --ranks 4 --json > estimate.res
"$tessera" estimate-memory full2.json --ranks 2 --json > estimate_full2.res
"$tessera" estimate-memory fullbf.json --json > estimate_fullbf.res
python3 - <<'PY'
import json
def last(path): return json.loads(open(path).read().splitlines()[-1])["memory"]
e, run = last("estimate.res"), last("ep2x2.res")
for key in ("params", "grads", "optimizer"):
    assert e[key] == run[key], (key, e, run)
assert run["activations"] <= e["activations"] <= 1.02 * run["activations"], (e, run)
for name in ("full2", "fullbf"):
    want, got = last(f"estimate_{name}.res")["activations"], last(f"{name}.res")["activations"]
    print(f"{name}: MoE activations estimated {want} B, measured {got} B")
    assert want == got, (name, want, got)
print("estimate-memory: a rank's experts and MoE activations, as the run holds them")
PY
"$tessera" estimate-memory z2ep2.json --ranks 4 --json > zestimate.res
python3 - <<'PY'
import json
e = json.loads(open("zestimate.res").read().splitlines()[-1])["memory"]
run = json.loads(open("z2ep2x2.res").read().splitlines()[-1])["memory"]
dense = json.loads(open("ep2x2.res").read().splitlines()[-1])["memory"]
for key in ("params", "grads", "optimizer", "buffers"):
    assert e[key] == run[key], (key, e, run)
assert run["optimizer"] < dense["optimizer"], (run, dense)  # experts' moments partitioned
print("estimate-memory: ZeRO-2 with ep_size 2, experts over their replicas, as the run holds")
PY
# The shipped config runs (3 steps on the test corpus), here and at 2 ranks with ep_size 2
# (micro-batch 6: the same global batch).
shipped="$fixtures/../../configs/shakespeare_char_moe.json"
"$tessera" train "$shipped" --data corpus.txt --steps 3 > shipped.out 2>&1 ||
  { echo "configs/shakespeare_char_moe.json failed:"; tail -5 shipped.out; exit 1; }
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['moe']['ep_size']=2; c['train_micro_batch_size_per_gpu']=6; json.dump(c,open('shipped2.json','w'))" "$shipped"
mpirun -np 2 "$tessera" train shipped2.json --data corpus.txt --steps 3 > shipped2.out 2>&1 ||
  { echo "configs/shakespeare_char_moe.json at ep_size 2 failed:"; tail -5 shipped2.out; exit 1; }
# The all-to-all benchmark runs and reports its figures (their values are the machine's).
mpirun -np 2 "$tessera" bench all-to-all --sizes 16K,983040 --iters 2 --json > bench.out 2>&1 ||
  { echo "bench all-to-all failed:"; tail -3 bench.out; exit 1; }
python3 - <<'PY'
import json
b = json.loads([l for l in open("bench.out") if l.startswith("{")][-1])
assert b["ranks"] == 2 and b["bandwidth_bytes_per_s"] > 0, b
assert [r["bytes"] for r in b["sizes"]] == [16384, 983040], b
assert all(r["measured_s"] > 0 and r["theory_s"] > 0 for r in b["sizes"]), b
PY
if mpirun -np 2 "$tessera" bench all-to-all --sizes 3 > badbench.out 2>&1 ||
   ! grep -q "is not a byte count" badbench.out; then
  echo "bench all-to-all --sizes 3: expected an error naming it"; cat badbench.out; exit 1
fi
config bad_divide '{"num_experts": 3, "ep_size": 2}'
expect_bad bad_divide.json 2 "moe.num_experts: 3 experts do not divide among ep_size 2"
config bad_ep '{"num_experts": 4, "ep_size": 4}'
expect_bad bad_ep.json 2 "'moe.ep_size' 4 does not divide the 2 data-parallel ranks"
config bad_k '{"num_experts": 4, "k": 3}'
expect_bad bad_k.json 1 "'moe.k' is 3, expected 1 or 2"
config bad_policy '{"num_experts": 4, "noisy_gate_policy": "Gumbel"}'
expect_bad bad_policy.json 1 "'Gumbel' is not a noisy gate policy"
config bad_pyramid '{"num_experts": [2, 4, 8], "expert_interval": 1}'
expect_bad bad_pyramid.json 1 "moe.num_experts: 3 counts for 2 MoE layers"
config bad_zero '{"num_experts": 4, "ep_size": 2}' 'c["zero_optimization"]["stage"] = 3'
expect_bad bad_zero.json 2 "zero_optimization.stage 3 with MoE expert parallelism"
config bad_pipe '{"num_experts": 4}' 'c["pipeline"] = {"stages": 2}'
expect_bad bad_pipe.json 2 "'moe' in a pipeline"
config bad_sp '{"num_experts": 4}' 'c["tensor_parallel"] = {"autotp_size": 2, "sequence_parallel": True}'
expect_bad bad_sp.json 2 "'moe' with tensor_parallel.sequence_parallel"
config bad_many '{"num_experts": 100000000}'
expect_bad bad_many.json 1 "'moe.num_experts' is \"100000000\", expected counts from 1 to 65536"
config bad_groups '{"num_experts": 4, "gating_groups": 3}'
expect_bad bad_groups.json 1 "'moe.gating_groups' 3 does not divide a micro-batch's 128 tokens"
config bad_factor '{"num_experts": 4, "eval_capacity_factor": 1e30}'
expect_bad bad_factor.json 1 "'moe.eval_capacity_factor' is 1e+30, expected > 0 and <= 64"
config bad_none '{"k": 2}'
expect_bad bad_none.json 1 "'moe.num_experts' is missing: 'moe.k' states a MoE layout"
echo "bad layouts: errors naming the key"
