#!/usr/bin/env bash
# `tessera trial` with the built-in models, as a user runs it:
#  - builtin:gpt2 trains what `tessera train` trains on the same config: every batch's loss
#    (the mean of its micro-batches) and the validations at the same steps agree to 1e-9
#    (dropout and gradient accumulation on), on 1 slot, on 2 (mpirun), and on 2 slots as
#    one tensor-parallel pair, as a 2-stage pipeline, and on 4 as 3D (2 stages x 2
#    tensor-parallel), and on 1 with curriculum learning, progressive layer drop and random-LTD:
#    the trial is assembled by launch::build as the train command is;
#  - a dotted hyperparameter overrides the config (optimizer.params.lr) and changes the run;
#  - SIGTERM then the same command: the final validation equals the uninterrupted run's;
#  - builtin:bert trains and validates;
#  - mistakes stop with a message naming the thing: a user entrypoint, no
#    hyperparameters.config, a model type the entrypoint does not build, slots_per_trial
#    not matching the processes, a config file that is not there.
set -euo pipefail
source "$(dirname "$0")/cli_setup.sh"

python3 - "$fixtures/train_small.json" "$work" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); work = sys.argv[2]
c["train_micro_batch_size_per_gpu"] = 1   # gradient accumulation: 4 (1 rank), 2 (2 ranks)
c["data"]["path"] = work + "/corpus.txt"
c["train"].update({"steps": 12, "sample_tokens": 0})
c["csv_monitor"] = {"enabled": True, "output_path": work + "/csv", "job_name": "train"}
json.dump(c, open(work + "/gpt.json", "w"))
c.pop("csv_monitor")
json.dump(c, open(work + "/gpt_trial.json", "w"))
ltd = {"enabled": True, "total_layer_num": 2, "random_ltd_layer_num": 1, "random_ltd_layer_id": [1],
       "model_type": "decoder", "random_ltd_schedule": {"min_value": 8, "max_value": 16,
       "schedule_type": "fixed_linear", "schedule_config": {"require_steps": 6, "seq_per_step": 8}}}
layouts = {"tp2": {"tensor_parallel": {"autotp_size": 2}}, "pp2": {"pipeline": {"stages": 2}},
           "3d": {"tensor_parallel": {"autotp_size": 2}, "pipeline": {"stages": 2}},
           "eff": {"curriculum_learning": {"enabled": True, "curriculum_type": "seqlen",
                                           "min_difficulty": 8, "max_difficulty": 16,
                                           "schedule_type": "fixed_linear",
                                           "schedule_config": {"total_curriculum_step": 6,
                                                               "difficulty_step": 8}},
                   "progressive_layer_drop": {"enabled": True, "theta": 0.5, "gamma": 0.3},
                   "data_efficiency": {"data_routing": {"random_ltd": ltd}}}}
for name, sections in layouts.items():
    l = dict(c, **sections)
    json.dump(l, open(f"{work}/gpt_trial_{name}.json", "w"))
    l["csv_monitor"] = {"enabled": True, "output_path": work + "/csv", "job_name": "train"}
    json.dump(l, open(f"{work}/gpt_{name}.json", "w"))
b = json.loads(json.dumps(c))
b["model"] = {"type": "bert", "n_layer": 2, "n_head": 2, "n_embd": 32, "intermediate_size": 64,
              "block_size": 16, "dropout": 0.0}
b["data"].update({"mask_prob": 0.15, "nsp": True})
json.dump(b, open(work + "/bert.json", "w"))
PY

exp() {  # name entrypoint config batches slots
  cat > "$work/$1.yaml" <<YAML
name: $1
entrypoint: $2
hyperparameters:
  config: $3
searcher: {name: single, metric: validation_loss, max_length: {batches: $4}}
min_validation_period: {batches: 6}
scheduling_unit: 3
resources: {slots_per_trial: $5}
YAML
}

# Under the sanitizers: 1 and 2 slots, 3D (which takes the tensor-parallel and pipeline
# paths both) and the one-slot stop.
sanitizer_cases="1 2 3d stop"
for slots in 1 2 tp2 pp2 3d eff; do
  skip_under_sanitizer "$slots" && continue
  case $slots in
    1) n=1 suffix= ;; 2) n=2 suffix= ;; 3d) n=4 suffix=_3d ;; eff) n=1 suffix=_eff ;;
    *) n=2 suffix=_$slots ;;
  esac
  run=(); [ "$n" != 1 ] && run=(mpirun -np "$n")
  rm -rf "$work/csv"
  "${run[@]}" "$tessera" train "gpt$suffix.json" --json > "train$slots.out" 2> "train$slots.err"
  exp "gpt$slots" builtin:gpt2 "gpt_trial$suffix.json" 12 "$n"
  "${run[@]}" "$tessera" trial "gpt$slots.yaml" --json > "trial$slots.out" 2> "trial$slots.err" ||
    { cat "trial$slots.err"; exit 1; }
  python3 - "$work" "$slots" <<'PY'
import csv, json, sys
work, slots = sys.argv[1], sys.argv[2]
def rows(name):  # step -> value; the csv's x axis is samples, 4 a step
    with open(f"{work}/csv/train/{name}.csv") as f:
        return {int(r[0]) // 4: float(r[1]) for r in list(csv.reader(f))[1:]}
train_loss, val_loss = rows("Train_Samples_train_loss"), rows("Eval_val_loss")
micro, vals = [], {}
for line in open(f"{work}/checkpoints/gpt{slots}/trial_1/metrics.jsonl"):
    j = json.loads(line)
    if j["type"] == "training":
        micro += [m["loss"] for m in j["batch_metrics"]]
    else:
        vals[j["batches"]] = j["metrics"]["validation_loss"]
per_batch = len(micro) // 12
trial_loss = {s + 1: sum(micro[s * per_batch:(s + 1) * per_batch]) / per_batch for s in range(12)}
close = lambda a, b: abs(a - b) <= 1e-9 * abs(b)
ok = sorted(train_loss) == list(range(1, 13)) and all(close(trial_loss[s], train_loss[s]) for s in train_loss) \
    and sorted(vals) == sorted(val_loss) == [6, 12] and all(close(vals[s], val_loss[s]) for s in vals)
label = {"tp2": "2 tensor-parallel", "pp2": "2 pipeline-stage", "3d": "4 3D (2 stages x 2 tensor-parallel)",
         "eff": "1 (curriculum, progressive layer drop and random-LTD on)"}
print(f"{label.get(slots, slots)} slot(s): tessera trial's 12 batch losses and validations at {sorted(vals)} "
      f"{'equal' if ok else 'DIFFER FROM'} tessera train's (last {trial_loss[12]:.6f} / {train_loss[12]:.6f})")
if not ok:
    print(" trial", trial_loss, vals, "\n train", train_loss, val_loss)
sys.exit(0 if ok else 1)
PY
done

# A dotted hyperparameter overrides the config.
exp lr builtin:gpt2 gpt_trial.json 12 1
sed -i 's/^  config: gpt_trial.json/  config: gpt_trial.json\n  optimizer.params.lr: 0.0001/' lr.yaml
"$tessera" trial lr.yaml --json > lr.out 2> lr.err
python3 - <<'PY'
import json
a = json.loads(open("trial1.out").read().splitlines()[-1])["validation_metrics"]["validation_loss"]
b = json.loads(open("lr.out").read().splitlines()[-1])["validation_metrics"]["validation_loss"]
assert b > a + 0.05, (a, b)  # lr 1e-4 instead of 3e-3 learns less in 12 steps
print(f"optimizer.params.lr 1e-4 overrides the config's 3e-3: validation_loss {b:.4f} vs {a:.4f}")
PY

# SIGTERM, then the same command: the same final validation as without the stop (one slot,
# and a 2-stage pipeline whose ranks each get the signal, as a scheduler sends it).
stop_and_rerun() {  # name config slots
  skip_under_sanitizer "$1" && return 0
  local run=(); [ "$3" != 1 ] && run=(mpirun -np "$3")
  exp "$1-long" builtin:gpt2 "$2" 400 "$3"
  exp "$1" builtin:gpt2 "$2" 400 "$3"
  "${run[@]}" "$tessera" trial "$1-long.yaml" --json > "$1-long.out" 2>&1
  for attempt in 1 2 3 4 5 6 7 8; do
    rm -rf "checkpoints/$1"
    "${run[@]}" "$tessera" trial "$1.yaml" --json > "$1-1.out" 2>&1 & job=$!
    sleep "$(python3 -c 'import random; print(random.uniform(0.3, 1.5))')"
    pkill -TERM -f "^$tessera trial $1.yaml" 2>/dev/null || true
    wait "$job" || true
    grep -q '"state":"STOPPED"' "$1-1.out" && break
  done
  grep -q '"state":"STOPPED"' "$1-1.out" || { echo "no stop in 8 tries"; cat "$1-1.out"; exit 1; }
  "${run[@]}" "$tessera" trial "$1.yaml" --json > "$1-2.out" 2>&1
  python3 - "$1" <<'PY'
import json, sys
name = sys.argv[1]
last = lambda f: json.loads(open(f).read().splitlines()[-1])
s1, a, b = last(f"{name}-1.out"), last(f"{name}-long.out"), last(f"{name}-2.out")
assert a["validation_metrics"] == b["validation_metrics"] and b["state"] == "COMPLETED", (a, b)
print(f"{name}: SIGTERM at batch {s1['batches']} of 400, rerun: final validation equal ({b['validation_metrics']})")
PY
}
stop_and_rerun stop gpt_trial.json 1
stop_and_rerun stop-pp2 gpt_trial_pp2.json 2

# BERT.
exp bert builtin:bert bert.json 12 1
"$tessera" trial bert.yaml --json > bert.out 2> bert.err || { cat bert.err; exit 1; }
grep -q '"state":"COMPLETED"' bert.out && grep -q validation_loss bert.out
echo "builtin:bert: $(tail -1 bert.out)"

# Mistakes.
expect_error() {  # yaml expected-text
  if "$tessera" trial "$1" > err.out 2>&1; then echo "$1 was accepted"; exit 1; fi
  grep -qF "$2" err.out || { echo "$1: expected '$2' in:"; cat err.out; exit 1; }
  echo "$1: $(grep -F "$2" err.out | head -1)"
}
exp mine ./my_trial gpt_trial.json 4 1; expect_error mine.yaml "tessera trial runs the built-in trials"
exp noconf builtin:gpt2 gpt_trial.json 4 1; sed -i 's/^  config: .*/  lr: 0.1/' noconf.yaml
expect_error noconf.yaml "need 'hyperparameters.config'"
exp wrong builtin:bert gpt_trial.json 4 1; expect_error wrong.yaml "entrypoint builtin:bert but"
exp slots builtin:gpt2 gpt_trial.json 4 2; expect_error slots.yaml "start it with mpirun -np 2"
exp missing builtin:gpt2 nowhere.json 4 1; expect_error missing.yaml "nowhere.json"
report_sanitizer_skips
echo ok
