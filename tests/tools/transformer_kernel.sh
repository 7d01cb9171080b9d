#!/usr/bin/env bash
# `"model": {"transformer_kernel": true}` and its "transformer_kernel" section on the built-in
# models. BERT and GPT-2 with the kernel and every memory option, on one process, at tp 2, tp 2
# with sequence parallelism and pp 2, train to the losses one process trains to without it
# (1e-5 relative over 20 steps); with attention dropout on, tp 2, sp, pp 2, dp 2 with ZeRO-3
# and tp 2 x pp 2 reproduce one process (1e-6). Each option saves the bytes derived by hand below (the
# engine's "memory": {"activations"} on one process, to the byte), and `estimate-memory`
# predicts every run within 1%. Bad sections are errors naming the key.
set -euo pipefail
source "$(dirname "$0")/cli_setup.sh"
python3 - "$fixtures/train_small.json" <<'PY'
import itertools, json, sys
c = json.load(open(sys.argv[1]))
c["data"]["path"] = "corpus.txt"
c["train_batch_size"], c["gradient_accumulation_steps"] = 4, 2
c["model"].update({"n_head": 4, "dropout": 0.1})
c["train"].update({"steps": 20, "sample_tokens": 0, "eval_interval": 10})
c["scheduler"]["params"]["total_num_steps"] = 20
bert = {"type": "bert", "n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 16, "dropout": 0.1}
every = {"normalize_invertible": True, "gelu_checkpoint": True, "stochastic_mode": True}
drop = dict(every, attn_dropout_ratio=0.1, attn_dropout_checkpoint=True)
variants = {"plain": None, "join": {}, "inv": {"normalize_invertible": True},
            "gelu": {"gelu_checkpoint": True}, "ad": {"attn_dropout_ratio": 0.1},
            "all": every, "drop": drop}
layouts = {"one": {}, "tp2": {"tensor_parallel": {"autotp_size": 2}},
           "sp": {"tensor_parallel": {"autotp_size": 2, "sequence_parallel": True}},
           "pp2": {"pipeline": {"stages": 2}}, "z3": {"zero_optimization": {"stage": 3}},
           "3d": {"tensor_parallel": {"autotp_size": 2}, "pipeline": {"stages": 2}}}
for model, (layout, extra), (variant, section) in itertools.product(
        ("gpt2", "bert"), layouts.items(), variants.items()):
    if layout != "one" and variant not in ("all", "drop"):
        continue
    if layout in ("z3", "3d") and variant != "drop":
        continue
    d = json.loads(json.dumps(c))
    if model == "bert":
        d["model"] = dict(bert)
    d.update(extra)
    if section is not None:
        d["model"]["transformer_kernel"] = True
        d["transformer_kernel"] = section
    json.dump(d, open(f"{model}-{layout}-{variant}.json", "w"))
bad = {"off": ({"model": dict(c["model"])}, {"gelu_checkpoint": True}),
       "ratio": ({"model": dict(c["model"], transformer_kernel=True)}, {"attn_dropout_ratio": 1.5}),
       "kind": ({"model": dict(c["model"], transformer_kernel=True)}, {"gelu_checkpoint": "yes"})}
for name, (over, section) in bad.items():
    json.dump(dict(c, **over, transformer_kernel=section), open(f"bad-{name}.json", "w"))
PY
# Under the sanitizers: the kernel with every option in each layout (see cli_setup.sh).
sanitizer_cases="gpt2-one-drop gpt2-pp2-drop bert-one-all bert-tp2-drop"
for job in gpt2-*.json bert-*.json; do
  job=${job%.json}
  n=2; [[ $job == *-one-* ]] && n=1; [[ $job == *-3d-* ]] && n=4
  skip_under_sanitizer "$job" && continue
  mpirun -np "$n" "$tessera" train "$job.json" --json > "$job.out" 2> "$job.err" ||
    { echo "$job failed:"; tail -5 "$job.err"; exit 1; }
  "$tessera" estimate-memory "$job.json" --ranks "$n" --json 2> /dev/null | tail -1 > "$job.estimate"
done
python3 - <<'PY'
import json, os
skipped = set(open("skipped.txt").read().split()) if os.path.exists("skipped.txt") else set()
ran = lambda job: os.path.exists(job + ".out")
def lines(job):
    return [json.loads(l) for l in open(job + ".out").read().splitlines() if l.startswith("{")]
def losses(job):  # every rank's printed losses, by step
    return [(l["step"], l.get("train_loss"), l.get("val_loss")) for l in lines(job)
            if "train_loss" in l or "val_loss" in l]
def activations(job):  # the largest rank's, as estimate-memory predicts the peak rank
    return max(l["memory"]["activations"] for l in lines(job) if "memory" in l)
def close(run, ref, tol):  # each of run's lines within tol of ref's line for its step
    ref = {step: values for step, *values in ref}
    if not run or any(step not in ref for step, *_ in run):
        return False
    for step, *values in run:
        for u, v in zip(values, ref[step]):
            if (u is None) != (v is None) or (u is not None and abs(u - v) > tol * abs(v)):
                return False
    return True
fails = 0
def check(ok, what):
    global fails
    fails += not ok
    print(f"{what}{'' if ok else ' FAIL'}")
for model in ("gpt2", "bert"):
    plain = f"{model}-one-plain"  # (every layout reproduces one process without the kernel)
    for layout in ("one", "tp2", "sp", "pp2"):
        kernel = f"{model}-{layout}-all"
        if ran(plain) and ran(kernel):
            check(close(losses(kernel), losses(plain), 1e-5),
                  f"{kernel}: one process's losses without the kernel (1e-5)")
    one = f"{model}-one-drop"
    if ran(one) and ran(f"{model}-one-all"):  # (the dropout is applied)
        check(not close(losses(one), losses(f"{model}-one-all"), 1e-3),
              f"{one}: attention dropout changes the losses")
    for layout in ("tp2", "sp", "pp2", "z3", "3d"):
        job = f"{model}-{layout}-drop"
        if ran(job) and ran(one):
            check(close(losses(job), losses(one), 1e-6),
                  f"{job}: one process's losses with attention dropout (1e-6)")
# Each option's bytes on one process, derived by hand (float32; micro-batch B 2, T 16, C 32,
# I 128, H 4, L 2; every tensor here is a multiple of the allocator's 64-byte blocks).
L, B, T, C, I = 2, 2, 16, 32, 128
N = B * T
derived = {  # variant: (bytes against, what it changes)
    "inv": ("join", -L * 2 * N * C * 4),
    "gelu": ("join", -L * N * I * 4),
    # the fused attention applies the dropout and keeps no probabilities (the drop runs'
    # attn_dropout_checkpoint has nothing left to save)
    "ad": ("join", 0),
    "drop": ("all", 0)}
for model in ("gpt2", "bert"):
    base = f"{model}-one-plain"
    if ran(base) and ran(f"{model}-one-join"):
        # BERT's q, k, v weights joined for one GEMM are kept by it: 3 C^2 per layer.
        want = L * 3 * C * C * 4 if model == "bert" else 0
        got = activations(f"{model}-one-join") - activations(base)
        check(got == want, f"{model} joined q|k|v: {got} B (derived {want} B)")
    for variant, (against, want) in derived.items():
        job, ref = f"{model}-one-{variant}", f"{model}-one-{against}"
        if not (ran(job) and ran(ref)):
            continue
        got = activations(job) - activations(ref)
        check(got == want, f"{job}: {got:+} B against {against} (derived {want:+} B)")
for job in sorted(p[:-9] for p in os.listdir(".") if p.endswith(".estimate")):
    want = json.loads(open(job + ".estimate").read())["memory"]["activations"]
    got = activations(job)
    check(abs(want - got) <= 0.01 * got,
          f"{job}: measured {got} B, predicted {want} B ({100 * (want - got) / got:+.2f}%)")
raise SystemExit(fails)
PY
expect_bad bad-off.json 1 "'transformer_kernel.gelu_checkpoint' needs \"model\": {\"transformer_kernel\": true}"
expect_bad bad-ratio.json 1 "'transformer_kernel.attn_dropout_ratio' is 1.5, expected in [0, 1)"
expect_bad bad-kind.json 1 "transformer_kernel.gelu_checkpoint"
report_sanitizer_skips
echo ok
