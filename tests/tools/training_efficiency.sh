#!/usr/bin/env bash
# DeepSpeed's legacy curriculum_learning, progressive_layer_drop and data_efficiency's
# random-LTD on the built-in models, from configs. Curriculum: each step trains the sequence length of an independent
# transcription of DeepSpeed's fixed_linear rule (the csv_monitor's curriculum_seqlen), data
# parallel (ZeRO-2 too) and tensor + sequence parallel runs reproduce one process (1e-6), and a
# run resumed mid-curriculum continues with the straight run's losses bit for bit. PLD: a
# schedule that keeps every layer (theta 1, or gamma 0) is bit for bit the run without it; with
# layers dropped, data parallel (ZeRO-3 too), tensor, sequence parallel and activation
# checkpoints reproduce one process (1e-6), GPT-2 and BERT; the csv_monitor's pld_theta is
# DeepSpeed's formula. random-LTD: the kept count per step is DeepSpeed's fixed_linear rule, a
# schedule that keeps every token is bit for bit the run without it, and with tokens dropped data
# parallel (ZeRO-2 too), tensor parallel and activation checkpoints (with PLD on too) reproduce
# one process, GPT-2 and BERT. Pipelines and a bad section are errors naming the key.
set -euo pipefail
tools="$(cd "$(dirname "$0")" && pwd)"
source "$tools/cli_setup.sh"
python3 - "$tools" "$fixtures/train_small.json" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from run_checks import schedule_test_configs
c, bert = schedule_test_configs(sys.argv[2])
curriculum = {"enabled": True, "curriculum_type": "seqlen", "min_difficulty": 8,
              "max_difficulty": 32, "schedule_type": "fixed_linear",
              "schedule_config": {"total_curriculum_step": 10, "difficulty_step": 8}}
pld = {"enabled": True, "theta": 0.5, "gamma": 0.3}
layouts = {"one": {}, "dp2": {}, "z2": {"zero_optimization": {"stage": 2}},
           "z3": {"zero_optimization": {"stage": 3}},
           "sp": {"tensor_parallel": {"autotp_size": 2, "sequence_parallel": True}},
           "tp2": {"tensor_parallel": {"autotp_size": 2}},
           "ckpt": {"activation_checkpointing": {"partition_activations": False},
                    "model": dict(c["model"], n_layer=3)}}
jobs = {"gpt2-plain": {}, "gpt2-keep": {"progressive_layer_drop": dict(pld, theta=1.0)},
        "gpt2-g0": {"progressive_layer_drop": dict(pld, gamma=0.0)},
        "bert-plain": {"model": bert}}
for layout in ("one", "dp2", "z2", "sp"):
    jobs[f"gpt2-cur-{layout}"] = dict(layouts[layout], curriculum_learning=curriculum)
for layout in ("one", "dp2", "z3", "tp2", "sp"):
    jobs[f"gpt2-pld-{layout}"] = dict(layouts[layout], progressive_layer_drop=pld)
jobs["gpt2-pld3-one"] = dict(layouts["ckpt"], progressive_layer_drop=pld)
jobs["gpt2-pld3-ckpt"] = dict(layouts["ckpt"], progressive_layer_drop=pld,
                              activation_checkpointing={"partition_activations": False,
                                                        "number_checkpoints": 1})
for layout in ("one", "dp2", "tp2"):
    jobs[f"bert-pld-{layout}"] = dict(layouts[layout], model=bert, progressive_layer_drop=pld)
for layout in ("one", "dp2"):
    jobs[f"bert-cur-{layout}"] = dict(layouts[layout], model=bert, curriculum_learning=curriculum)
def data_efficiency(model_type, layers, ids, lo=8, hi=32):
    return {"enabled": True, "data_routing": {"enabled": True, "random_ltd": {
        "enabled": True, "total_layer_num": layers, "random_ltd_layer_num": len(ids),
        "random_ltd_layer_id": ids, "model_mask_name": "attention_mask",
        "model_type": model_type, "hidden_state_order": "batch_seq_dim",
        "random_ltd_schedule": {"min_value": lo, "max_value": hi, "schedule_type": "fixed_linear",
                                "schedule_config": {"require_steps": 12, "seq_per_step": 8}}}}}
for layout in ("one", "dp2", "z2", "tp2"):
    jobs[f"gpt2-ltd-{layout}"] = dict(layouts[layout], data_efficiency=data_efficiency("decoder", 2, [1]))
jobs["gpt2-ltd3-one"] = dict(layouts["ckpt"], data_efficiency=data_efficiency("decoder", 3, [0, 2]),
                             progressive_layer_drop=pld)
jobs["gpt2-ltd3-ckpt"] = dict(jobs["gpt2-ltd3-one"],
                              activation_checkpointing={"partition_activations": False,
                                                        "number_checkpoints": 1})
jobs["gpt2-ltdall"] = {"data_efficiency": data_efficiency("decoder", 2, [0, 1], 32, 32)}
for layout in ("one", "dp2", "tp2"):
    jobs[f"bert-ltd-{layout}"] = dict(layouts[layout], model=bert,
                                      data_efficiency=data_efficiency("encoder", 3, [1, 2]))
for name, over in jobs.items():
    d = dict(c, **over)
    d["csv_monitor"] = {"enabled": True, "output_path": "monitors", "job_name": name}
    json.dump(d, open(name + ".json", "w"))
bad = {"pld-pipe": {"pipeline": {"stages": 2}, "progressive_layer_drop": pld},
       "cur-pipe": {"pipeline": {"stages": 2}, "curriculum_learning": curriculum},
       "cur-type": {"curriculum_learning": dict(curriculum, curriculum_type="vocabularyrarity")},
       "cur-sp": {"tensor_parallel": {"autotp_size": 2, "sequence_parallel": True},
                  "curriculum_learning": dict(curriculum, min_difficulty=9, max_difficulty=31,
                                              schedule_type="fixed_discrete",
                                              schedule_config={"difficulty": [9, 31],
                                                               "max_step": [3]})},
       "cur-custom": {"curriculum_learning": dict(curriculum, schedule_type="custom")},
       "pld-theta": {"progressive_layer_drop": dict(pld, theta=2)},
       "ltd-sp": {"tensor_parallel": {"autotp_size": 2, "sequence_parallel": True},
                  "data_efficiency": data_efficiency("decoder", 2, [1])},
       "ltd-layers": {"data_efficiency": data_efficiency("decoder", 4, [1])},
       "ltd-sparse": {"data_efficiency": data_efficiency("decoder", 2, [1]),
                      "sparse_attention": {"mode": "fixed", "block": 16, "num_local_blocks": 1}}}
for name, over in bad.items():
    json.dump(dict(c, **over), open(f"bad-{name}.json", "w"))
PY
sanitizer_cases="gpt2-cur-sp gpt2-pld-dp2 gpt2-pld3-ckpt bert-pld-tp2 gpt2-ltd3-ckpt bert-ltd-dp2"
for job in gpt2-*.json bert-*.json; do
  job=${job%.json}
  n=1; [[ $job =~ -(dp2|z2|z3|sp|tp2)$ ]] && n=2
  skip_under_sanitizer "$job" && continue
  mpirun -np "$n" "$tessera" train "$job.json" --json > "$job.out" 2> "$job.err" ||
    { echo "$job failed:"; tail -5 "$job.err"; exit 1; }
done
# Resumed mid-curriculum (step 6 of its 10): the straight run's losses from there, bit for bit.
resume_at gpt2-cur-one 6 gpt2-cur-resume
python3 - "$tools" <<'PY'
import math, sys
sys.path.insert(0, sys.argv[1])
from run_checks import check, close, finish, losses, monitor, ran
# DeepSpeed's fixed_linear rule, transcribed: step s trains f(s + 1) tokens, floor((t / T) *
# (max - min) + min) rounded down to a multiple of difficulty_step, at most max.
def fixed_linear(t, lo=8, hi=32, total=10, step=8):
    d = math.floor(t / total * (hi - lo) + lo)
    return min(d - d % step, hi)
want = [fixed_linear(s + 1) for s in range(16)]
for model in ("gpt2", "bert"):
    one = f"{model}-cur-one"
    if ran(one):
        check(monitor(one, "curriculum_seqlen") == want, f"{one}: sequence length per step {want}")
        check(not close(losses(one), losses(f"{model}-plain"), 1e-3),
              f"{one}: the curriculum changes the losses")
    for layout in ("dp2", "z2", "sp"):
        job = f"{model}-cur-{layout}"
        if ran(job) and ran(one):
            check(close(losses(job), losses(one), 1e-6), f"{job}: one process's losses (1e-6)")
if ran("gpt2-cur-resume"):
    straight, resumed = losses("gpt2-cur-one"), losses("gpt2-cur-resume")
    check(len(resumed) == 11 and resumed == straight[6:],
          "gpt2-cur-resume: steps 7-16 and the validation equal the straight run's bit for bit")
for job in ("gpt2-keep", "gpt2-g0"):
    if ran(job):
        check(losses(job) == losses("gpt2-plain"),
              f"{job}: every layer kept = no PLD, bit for bit (every step)")
theta = lambda t: (1 - 0.5) * math.exp(-0.3 * t) + 0.5  # DeepSpeed's _prob
if ran("gpt2-pld-one"):
    got = monitor("gpt2-pld-one", "pld_theta")
    want = [1.0] + [theta(s - 1) for s in range(1, 16)]
    check(all(abs(g - w) <= 1e-12 for g, w in zip(got, want)) and len(got) == 16,
          "gpt2-pld-one: pld_theta per step is DeepSpeed's")
def reproduce(model, one, layouts, dropped):  # one process's run changes; layouts equal it
    if ran(one):
        check(not close(losses(one), losses(f"{model}-plain"), 1e-3),
              f"{one}: dropped {dropped} change the losses")
    for layout in layouts:
        job = one.replace("-one", f"-{layout}")
        if ran(job) and ran(one):
            check(close(losses(job), losses(one), 1e-6), f"{job}: one process's losses (1e-6)")
reproduce("gpt2", "gpt2-pld-one", ("dp2", "z3", "tp2", "sp"), "layers")
reproduce("gpt2", "gpt2-pld3-one", ("ckpt",), "layers")
reproduce("bert", "bert-pld-one", ("dp2", "tp2"), "layers")
# random-LTD: DeepSpeed's fixed_linear kept count (update_seq(s) at step s), transcribed.
def kept(s, lo=8, hi=32, steps=12, per=8):
    d = math.floor(s / steps * (hi - lo) + lo)
    return min(d - d % per, hi)
if ran("gpt2-ltd-one"):
    want = [kept(s) for s in range(16)]
    check(monitor("gpt2-ltd-one", "random_ltd_reserved_length") == want,
          f"gpt2-ltd-one: kept tokens per step {want}")
if ran("gpt2-ltdall"):
    check(losses("gpt2-ltdall") == losses("gpt2-plain"),
          "gpt2-ltdall: every token kept = no random-LTD, bit for bit (every step)")
reproduce("gpt2", "gpt2-ltd-one", ("dp2", "z2", "tp2"), "tokens")
reproduce("gpt2", "gpt2-ltd3-one", ("ckpt",), "tokens")
reproduce("bert", "bert-ltd-one", ("dp2", "tp2"), "tokens")
finish()
PY
expect_bad bad-pld-pipe.json 2 "'progressive_layer_drop' needs a model without pipeline stages"
expect_bad bad-cur-pipe.json 2 "'curriculum_learning' needs a model without pipeline stages"
expect_bad bad-cur-type.json 1 "'curriculum_learning.curriculum_type' is \"vocabularyrarity\""
expect_bad bad-cur-sp.json 2 "trains sequences of 9 tokens, which do not split over the 2"
expect_bad bad-cur-custom.json 1 "Engine::set_custom_curriculum_schedule"
expect_bad bad-pld-theta.json 1 "'progressive_layer_drop.theta' is 2, expected in [0, 1]"
expect_bad bad-ltd-sp.json 2 "needs whole sequences on each rank"
expect_bad bad-ltd-layers.json 1 "total_layer_num' is 4, but the model has 2 layers"
expect_bad bad-ltd-sparse.json 1 "GPT-2 with block-sparse attention (the 'sparse_attention' section) attends over layouts"
report_sanitizer_skips
echo ok
