#!/usr/bin/env bash
# DeepSpeed's "activation_checkpointing" section on the built-in models: every run gives the
# same 8 training losses and validations as without it, bit for bit (the rerun replays the
# dropout masks), for GPT-2 and BERT on one process, at tp 2, tp 2 with sequence parallelism
# and tp 2 x dp 2 with ZeRO-3. The activation memory the engine reports ("memory":
# {"activations"}) drops, and partition_activations at tp 2 saves each checkpoint's half
# input: layers x B*T*C x 4 bytes x (1 - 1/2), within 2%. A run's figure is its largest
# rank's. `estimate-memory` predicts every run's activation bytes within 1%, and on one
# process to the byte of a hand count. A wrong section is an error naming the key.
set -euo pipefail
source "$(dirname "$0")/cli_setup.sh"
python3 - "$fixtures/train_small.json" <<'PY'
import itertools, json, sys
c = json.load(open(sys.argv[1]))
c["data"]["path"] = "corpus.txt"
c["model"].update({"n_head": 4, "dropout": 0.1})
c["train"].update({"steps": 8, "sample_tokens": 0, "eval_interval": 4})
bert = {"type": "bert", "n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 16, "dropout": 0.1}
layouts = {"one": {}, "tp2": {"tensor_parallel": {"autotp_size": 2}},
           "sp": {"tensor_parallel": {"autotp_size": 2, "sequence_parallel": True}},
           "z3": {"tensor_parallel": {"autotp_size": 2}, "zero_optimization": {"stage": 3}}}
ckpts = {"plain": None, "ac": {}, "part": {"partition_activations": True},
         "all": {"partition_activations": True, "cpu_checkpointing": True,
                 "contiguous_memory_optimization": True, "number_checkpoints": 2,
                 "synchronize_checkpoint_boundary": True, "profile": True}}
for (model, (layout, extra), (ck, section)) in itertools.product(
        ("", "bert-"), layouts.items(), ckpts.items()):
    d = json.loads(json.dumps(c))
    if model:
        d["model"] = dict(bert)
    d.update(extra)
    if section is not None:
        d["activation_checkpointing"] = section
    json.dump(d, open(f"{model}{layout}-{ck}.json", "w"))
bad = dict(c, activation_checkpointing={"contiguous_memory_optimization": True})
json.dump(bad, open("bad.json", "w"))
PY
# Under the sanitizers: every layout plain and with every option, one option set per layer of
# the section (see cli_setup.sh); the checks below pass over what did not run.
sanitizer_cases="one-plain one-all tp2-plain tp2-ac tp2-part tp2-all sp-plain sp-all z3-plain
  z3-all bert-one-plain bert-one-ac bert-tp2-plain bert-tp2-part"
for model in "" bert-; do
  for layout in one tp2 sp z3; do
    n=2; [ "$layout" = one ] && n=1; [ "$layout" = z3 ] && n=4
    for ck in plain ac part all; do
      job="$model$layout-$ck"
      skip_under_sanitizer "$job" && continue
      mpirun -np "$n" "$tessera" train "$job.json" --json > "$job.out" 2> "$job.err" ||
        { echo "$job failed:"; tail -5 "$job.err"; exit 1; }
    done
  done
done
grep -q "checkpoint 1: 8 forwards" tp2-all.err  # profile: two checkpoints, one per layer
for job in *-*.json; do
  job=${job%.json}; skipped "$job" && continue
  n=2; case $job in *one-*) n=1;; *z3-*) n=4;; esac
  "$tessera" estimate-memory "$job.json" --ranks "$n" --json 2> /dev/null | tail -1 > "$job.estimate"
done
python3 - <<'PY'
import json, os
skipped = set(open("skipped.txt").read().split()) if os.path.exists("skipped.txt") else set()
# Every rank prints its line; ranks differ by a block or two (tp rank 1's vocabulary-parallel
# masks), so a run's figure is its largest rank's, as estimate-memory predicts the peak rank.
def last(job):
    lines = [json.loads(l) for l in open(job + ".out").read().splitlines() if l.startswith("{")]
    return max((l for l in lines if "memory" in l), key=lambda l: l["memory"]["activations"])
fails = 0
for model in ("", "bert-"):
    for layout in ("one", "tp2", "sp", "z3"):
        if f"{model}{layout}-plain" in skipped:
            continue
        plain = last(f"{model}{layout}-plain")
        for ck in ("ac", "part", "all"):
            if f"{model}{layout}-{ck}" in skipped:
                continue
            run = last(f"{model}{layout}-{ck}")
            same = (run["train_loss"], run["val_loss"]) == (plain["train_loss"], plain["val_loss"])
            less = run["memory"]["activations"] < plain["memory"]["activations"]
            fails += not (same and less)
            print(f"{model}{layout} {ck}: losses {'equal' if same else 'DIFFER'}, activations "
                  f"{run['memory']['activations']} B (without: {plain['memory']['activations']} B)")
# estimate-memory's prediction against the measure.
for job in sorted(p[:-9] for p in __import__("os").listdir(".") if p.endswith(".estimate")):
    want = json.loads(open(job + ".estimate").read())["memory"]["activations"]
    got = last(job)["memory"]["activations"]
    ok = abs(want - got) <= 0.01 * got
    fails += not ok
    print(f"{job}: measured {got} B, predicted {want} B ({100 * (want - got) / got:+.2f}%)"
          f"{'' if ok else ' FAIL'}")
# The hand count for GPT-2 on one process (L layers, N = B*T rows, C, H heads, V tokens, in
# float32 values): per layer 17 N C (input, LayerNorms' output and residual sum, q, k, v,
# attention output and merged heads, 8 N C of MLP) + 4 N (LayerNorm statistics) + N H
# (attention logsumexp); ln_f's input and output 2 N C + 2 N; logits N V and their
# logsumexp N; then 8 T bytes of position ids and two 64-byte scalars (loss, target count).
L, B, T, C, H = 2, 4, 16, 32, 4
N = B * T
V = (json.loads(open("one-plain.estimate").read())["num_parameters"]
     - T * C - L * (12 * C * C + 13 * C) - 2 * C) // C
hand = 4 * (L * (17 * N * C + 4 * N + N * H) + 2 * N * C + 3 * N + N * V) + 8 * T + 128
print(f"GPT-2 one process: hand count {hand} B, measured {last('one-plain')['memory']['activations']} B")
fails += hand != last("one-plain")["memory"]["activations"]
# partition_activations at tp 2: each of the 2 layers' kept input [4, 16, 32] float32 halves.
saved = last("tp2-ac")["memory"]["activations"] - last("tp2-part")["memory"]["activations"]
want = 2 * 4 * 16 * 32 * 4 // 2
print(f"tp2 partition_activations saves {saved} B per rank (theory {want})")
fails += abs(saved - want) > 0.02 * want
raise SystemExit(fails)
PY
if "$tessera" train bad.json > bad.out 2>&1; then echo "bad.json accepted"; exit 1; fi
grep -q "contiguous_memory_optimization' needs 'number_checkpoints'" bad.out
report_sanitizer_skips
echo ok
