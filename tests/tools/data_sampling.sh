#!/usr/bin/env bash
# data_efficiency.data_sampling, DeepSpeed's curriculum sampler, from configs: GPT-2 sampled by
# vocabulary rarity (percentile clusters) with seqlen_truncate, its per-step sequence length and
# difficulty against independent transcriptions of DeepSpeed's fixed_linear and fixed_root
# rules, data parallel (ZeRO-2 too), tensor parallel and a pipeline (rarity alone) reproducing
# one process (1e-6, dropout on); a resume mid-curriculum bit for bit; DeepSpeed data-analyzer
# files given by path (Tessera's own cache, read as a user's) sampling exactly as the built-in
# metric; seqlen_reshape; BERT with seqlen_truncate at 1 and 2 ranks; and bad sections, bad
# index files and a run past num_epochs as errors naming the key, file or step.
set -euo pipefail
tools="$(cd "$(dirname "$0")" && pwd)"
source "$tools/cli_setup.sh"
python3 - "$tools" "$fixtures/train_small.json" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from run_checks import schedule_test_configs
c, bert = schedule_test_configs(sys.argv[2])
def sched(lo, hi, kind="fixed_linear", **config):
    return {"min_difficulty": lo, "max_difficulty": hi, "schedule_type": kind, "schedule_config": config}
rarity = dict(difficulty_type="percentile", clustering_type="schedule_based",
              **sched(10, 100, "fixed_root", total_curriculum_step=10, difficulty_step=1, root_degree=2))
truncate = dict(difficulty_type="value", clustering_type="single_cluster",
                **sched(8, 32, total_curriculum_step=10, difficulty_step=8))
reshape = dict(difficulty_type="value", clustering_type="single_cluster",
               **sched(8, 32, "fixed_discrete", difficulty=[8, 16, 32], max_step=[4, 8]))
def sampling(metrics, **extra):
    return {"enabled": True, "seed": 1234, "data_sampling": dict(
        {"enabled": True, "num_epochs": 100, "num_workers": 0, "curriculum_learning": {
            "enabled": True, "data_cluster_path": "clusters", "curriculum_metrics": metrics}},
        **extra)}
both = sampling({"vocabularyrarity": rarity, "seqlen_truncate": truncate})
alone = sampling({"vocabularyrarity": rarity})
layouts = {"one": {}, "dp2": {}, "z2": {"zero_optimization": {"stage": 2}},
           "tp2": {"tensor_parallel": {"autotp_size": 2}}, "pipe": {"pipeline": {"stages": 2}}}
jobs = {"gpt2-plain": {}}
for layout in ("one", "dp2", "z2", "tp2"):
    jobs[f"gpt2-ds-{layout}"] = dict(layouts[layout], data_efficiency=both)
for layout in ("one", "pipe"):
    jobs[f"gpt2-rarity-{layout}"] = dict(layouts[layout], data_efficiency=alone)
for layout in ("one", "dp2"):
    jobs[f"gpt2-reshape-{layout}"] = dict(layouts[layout], data_efficiency=sampling({"seqlen_reshape": reshape}))
    jobs[f"bert-ds-{layout}"] = dict(layouts[layout], model=bert,
                                     data_efficiency=sampling({"seqlen_truncate": truncate}))
for name, over in jobs.items():
    d = dict(c, **over)
    d["csv_monitor"] = {"enabled": True, "output_path": "monitors", "job_name": name}
    json.dump(d, open(name + ".json", "w"))
user = dict(rarity, index_to_sample_path="METRICS/vocabularyrarity-block32_index_to_sample",
            index_to_metric_path="METRICS/vocabularyrarity-block32_index_to_metric")
d = dict(c, data_efficiency=sampling({"myrarity": user}))
d["csv_monitor"] = {"enabled": True, "output_path": "monitors", "job_name": "gpt2-user-one"}
json.dump(d, open("gpt2-user-one.json.in", "w"))
wide = dict(rarity, index_to_sample_path=sys.argv[2].replace("train_small.json", "deepspeed/data_sampling/wide"))
bad = {"dynamic": sampling({"vocabularyrarity": rarity}, dynamic_batching={"enabled": True, "max_tokens": 64}),
       "unknown": sampling({"wordiness": rarity}),
       "single": sampling({"wordiness": truncate}),
       "value-paths": sampling({"mine": dict(rarity, difficulty_type="value", index_to_sample_path="x")}),
       "no-type": sampling({"vocabularyrarity": {k: v for k, v in rarity.items() if k != "difficulty_type"}}),
       "custom": sampling({"vocabularyrarity": dict(rarity, schedule_type="custom")}),
       "reshape-24": sampling({"seqlen_reshape": dict(reshape, schedule_config={"difficulty": [8, 24, 32], "max_step": [4, 8]})}),
       "truncate-long": sampling({"seqlen_truncate": dict(truncate, max_difficulty=64)}),
       "missing": sampling({"mine": dict(rarity, index_to_sample_path="nowhere/index")}),
       "other-data": sampling({"mine": wide}),
       "epochs": sampling({"vocabularyrarity": rarity}, num_epochs=1)}
for name, de in bad.items():
    json.dump(dict(c, data_efficiency=de), open(f"bad-{name}.json", "w"))
json.dump(dict(c, model=bert, data_efficiency=alone), open("bad-bert-rarity.json", "w"))
json.dump(dict(c, pipeline={"stages": 2}, data_efficiency=both), open("bad-pipe-truncate.json", "w"))
json.dump(dict(c, data_efficiency=both, curriculum_learning={"enabled": True, "curriculum_type": "seqlen",
          **sched(8, 32, total_curriculum_step=10, difficulty_step=8)}), open("bad-legacy.json", "w"))
PY
sanitizer_cases="gpt2-ds-dp2 gpt2-rarity-pipe gpt2-reshape-one bert-ds-dp2"
run_job() {  # job name: trains it with its rank count
  local job=$1 n=1
  [[ $job =~ -(dp2|z2|tp2|pipe)$ ]] && n=2
  skip_under_sanitizer "$job" && return 0
  mpirun -np "$n" "$tessera" train "$job.json" --json > "$job.out" 2> "$job.err" ||
    { echo "$job failed:"; tail -5 "$job.err"; exit 1; }
}
for job in gpt2-*.json bert-*.json; do run_job "${job%.json}"; done
# The metric cache beside the token cache, written once: a user's DeepSpeed-format files.
metrics=$(find "$XDG_CACHE_HOME" -type d -name metrics | head -1)
[ -n "$metrics" ] && [ -e "$metrics/vocabularyrarity-block32_index_to_sample.idx" ] ||
  { echo "no vocabularyrarity cache under $XDG_CACHE_HOME"; exit 1; }
sed "s|METRICS|$metrics|g" gpt2-user-one.json.in > gpt2-user-one.json
run_job gpt2-user-one
# Resumed mid-curriculum (step 6 of its 10): the straight run's losses from there, bit for bit.
resume_at gpt2-ds-one 6 gpt2-ds-resume
python3 - "$tools" <<'PY'
import math, sys
sys.path.insert(0, sys.argv[1])
from run_checks import check, close, finish, losses, monitor, ran
# DeepSpeed's CurriculumScheduler, transcribed: step s uses update_difficulty(s + 1), fixed_root
# floor((t / T) ** (1 / degree) * (max - min) + min) rounded down to a multiple of
# difficulty_step, at most max (fixed_linear is degree 1).
def fixed_root(t, lo, hi, total, step, degree=1):
    d = math.floor((t / total) ** (1 / degree) * (hi - lo) + lo)
    return min(d - d % step, hi)
seqlen = [fixed_root(s + 1, 8, 32, 10, 8) for s in range(16)]
rarity = [fixed_root(s + 1, 10, 100, 10, 1, 2) for s in range(16)]
if ran("gpt2-ds-one"):
    check(monitor("gpt2-ds-one", "curriculum_seqlen") == seqlen, f"gpt2-ds-one: sequence length per step {seqlen}")
    check(monitor("gpt2-ds-one", "curriculum_difficulty_vocabularyrarity") == rarity,
          f"gpt2-ds-one: rarity percentile per step {rarity}")
    if ran("gpt2-plain"):
        check(not close(losses("gpt2-ds-one"), losses("gpt2-plain"), 1e-3), "gpt2-ds-one: the sampler changes the losses")
for one, layouts in (("gpt2-ds-one", ("dp2", "z2", "tp2")), ("gpt2-rarity-one", ("pipe",)),
                     ("gpt2-reshape-one", ("dp2",)), ("bert-ds-one", ("dp2",))):
    for layout in layouts:
        job = one.replace("-one", f"-{layout}")
        if ran(job) and ran(one):
            check(close(losses(job), losses(one), 1e-6), f"{job}: one process's losses (1e-6)")
if ran("gpt2-user-one") and ran("gpt2-rarity-one"):
    check(losses("gpt2-user-one") == losses("gpt2-rarity-one"),
          "gpt2-user-one: DeepSpeed-format files by path sample as the built-in metric (bit for bit)")
if ran("gpt2-reshape-one") and ran("gpt2-plain"):
    check(not close(losses("gpt2-reshape-one"), losses("gpt2-plain"), 1e-3), "gpt2-reshape-one: the reshape changes the losses")
if ran("gpt2-ds-resume"):
    straight, resumed = losses("gpt2-ds-one"), losses("gpt2-ds-resume")
    check(len(resumed) == 11 and resumed == straight[6:],
          "gpt2-ds-resume: steps 7-16 and the validation equal the straight run's bit for bit")
finish()
PY
key=data_efficiency.data_sampling
expect_bad bad-dynamic.json 1 "'$key.dynamic_batching.enabled' is true: DeepSpeed's dynamic batching"
expect_bad bad-unknown.json 1 "'wordiness' is not a metric Tessera computes"
expect_bad bad-single.json 1 "'$key.curriculum_learning.curriculum_metrics.wordiness.clustering_type' is \"single_cluster\""
expect_bad bad-value-paths.json 1 "index_to_metric_path' is required with index_to_sample_path"
expect_bad bad-no-type.json 1 "vocabularyrarity.difficulty_type' is required"
expect_bad bad-custom.json 1 "a custom schedule is C++"
expect_bad bad-reshape-24.json 1 "the schedule reaches 24 tokens, which does not divide model.block_size (32)"
expect_bad bad-truncate-long.json 1 "max_difficulty' is 64, longer than model.block_size (32)"
expect_bad bad-missing.json 1 "nowhere/index.idx"
expect_bad bad-other-data.json 1 "index_to_sample names sample 65535, but the training data has"
expect_bad bad-bert-rarity.json 1 "BERT's batches are random sentence spans"
expect_bad bad-pipe-truncate.json 2 "seqlen_truncate' needs a model without pipeline stages"
expect_bad bad-legacy.json 1 "and the legacy 'curriculum_learning' section both set the sequence length"
python3 - <<'PY'
import json
d = json.load(open("bad-epochs.json"))
d["train"]["steps"], d["train_batch_size"] = 40, 256  # 10240 windows, past the ~3700
json.dump(d, open("bad-epochs.json", "w"))
PY
expect_bad bad-epochs.json 1 "$key.num_epochs is 1: 40 steps (train.steps) of 256 samples read more than"
# A damaged index: the bin cut short, named with the row and the offset.
cp "$metrics/vocabularyrarity-block32_index_to_sample.idx" cut.idx
head -c 10 "$metrics/vocabularyrarity-block32_index_to_sample.bin" > cut.bin
sed "s|$metrics/vocabularyrarity-block32_index_to_sample|$PWD/cut|" gpt2-user-one.json > bad-cut.json
expect_bad bad-cut.json 1 "runs past the end of '$PWD/cut.bin'"
report_sanitizer_skips
echo ok
