#!/usr/bin/env bash
# Hostile inputs on the trial, experiment, pipeline and tensor-parallel surfaces: each probe is
# a symptom once seen on main, and its failure message says which.
#  - divergence is never a success (fp16 skipping steps forever; --json nulls say why);
#  - config keys: a misspelt key names the key it meant; --strict / "strict": true refuse it;
#  - pipeline and ZeRO resumes refuse a checkpoint with layers the model lacks;
#  - experiment YAML: self-referencing aliases, alias bombs, huge grids, overflowing lengths,
#    non-UTF-8 names: errors, never a crash, and nothing created;
#  - an experiment is validated whole before it exists (unknown hyperparameter paths, a wrong
#    config path, grids without counts);
#  - a trial's results are its own (other hyperparameters, names that would be paths, two
#    stores sharing host_path);
#  - small wrong answers (estimate-memory --vocab 0, bench gemm --shape 0,0,0, describe's
#    table on stdout, the flops profile counting evaluation forwards).
set -uo pipefail
expect_prefix=""  # (several ranks print their errors at once)
source "$(dirname "$0")/expect_error.sh"
source "$(dirname "$0")/cli_setup.sh"
export TESSERA_STORE="$work/store"
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

config() {  # name python-edit: writes $work/name.json from train_small.json
  python3 - "$fixtures/train_small.json" "$work/$1.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["data"]["path"] = "corpus.txt"; c["train"]["sample_tokens"] = 0
exec(sys.argv[3]); json.dump(c, open(sys.argv[2], "w"))
PY
}

# ---- Divergence is never a success.
config diverge "c['fp16'] = {'enabled': True, 'initial_scale_power': 4}; c['optimizer']['params']['lr'] = 1e4; c['gradient_clipping'] = 0; c['train'].update({'steps': 40, 'eval_interval': 0})"
expect "fp16 with a huge learning rate (was: every step skipped, exit 0, train_loss null)" \
  "the run has diverged" "$tessera" train diverge.json --steps 40
config small "pass"
"$tessera" train small.json --steps 2 --save ck2 >/dev/null 2>&1 || fail "could not train 2 steps"
out=$("$tessera" train small.json --steps 2 --resume ck2 --json 2>/dev/null | tail -1)
if python3 -c 'import json,sys; j = json.loads(sys.argv[1]); assert j["train_loss"] is None and "already at step 2" in j["train_loss_missing"] and j["steps_run"] == 0, j' "$out"; then
  echo "ok   --json says why train_loss is null (a resumed run with nothing to do)"
else fail "--json null train_loss without a reason: $out"; fi

# ---- Unknown keys name the key they most likely meant; strict refuses them.
config misspelt "c['optimiser'] = c.pop('optimizer'); c['train']['steps'] = 1"
out=$("$tessera" train misspelt.json --steps 1 2>&1 >/dev/null)
if grep -qF "unknown key 'optimiser' (ignored) (did you mean 'optimizer'?)" <<<"$out"; then
  echo "ok   a misspelt top-level key names the key it meant"
else fail "'optimiser' warned without naming 'optimizer'"; fi
config misspelt_lr "c['optimizer']['params']['lrr'] = 0.1"
out=$("$tessera" train misspelt_lr.json --steps 1 2>&1 >/dev/null)
if grep -qF "did you mean 'optimizer.params.lr'" <<<"$out"; then
  echo "ok   a misspelt nested key names its full path"
else fail "'optimizer.params.lrr' warned without naming 'optimizer.params.lr'"; fi
expect "--strict refuses an unknown key" "unknown keys (refused.*'optimiser' (did you mean 'optimizer'?)" \
  "$tessera" train misspelt.json --steps 1 --strict
config strict "c['optimiser'] = c.pop('optimizer'); c['strict'] = True"
expect "\"strict\": true refuses an unknown key" "'optimiser'" "$tessera" train strict.json --steps 1

# ---- Resumes that would drop layers.
config two_stage "c['pipeline'] = {'stages': 2}"
config one_layer_pipe "c['pipeline'] = {'stages': 2}; c['model']['n_layer'] = 1"
config one_layer_zero "c['model']['n_layer'] = 1; c['zero_optimization'] = {'stage': 1}"
mpirun -np 2 "$tessera" train two_stage.json --steps 2 --save ckpipe >/dev/null 2>&1 || fail "could not train the pipeline"
expect "a 2-layer pipeline checkpoint into a 1-layer pipeline (was: h.1 silently dropped)" \
  "unexpected keys (.*transformer.h.1" mpirun -np 2 "$tessera" train one_layer_pipe.json --steps 3 --resume ckpipe
expect "a 2-layer one-process checkpoint into a 1-layer pipeline" \
  "unexpected keys (.*transformer.h.1" mpirun -np 2 "$tessera" train one_layer_pipe.json --steps 3 --resume ck2
expect "a 2-layer checkpoint into a 1-layer ZeRO-1 run" \
  "unexpected keys (.*transformer.h.1" mpirun -np 2 "$tessera" train one_layer_zero.json --steps 3 --resume ck2

# ---- Experiment YAML that would crash or exhaust the process; nothing may be created.
yaml_head="entrypoint: builtin:gpt2
searcher: {name: single, metric: validation_loss, max_length: {batches: 4}}"
printf '%s\nhyperparameters: {config: small.json}\ndata: &a [*a]\n' "$yaml_head" > alias_self.yaml
printf '%s\nhyperparameters: &h {config: small.json, me: *h}\n' "$yaml_head" > alias_map.yaml
python3 - "$yaml_head" <<'PY'
import sys
lines = [sys.argv[1], "hyperparameters: {config: small.json}", 'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
for i in range(1, 10):
    lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i-1}"] * 9) + "]")
lines.append("data: *a9")
open("alias_bomb.yaml", "w").write("\n".join(lines) + "\n")
grid = """entrypoint: builtin:gpt2
hyperparameters:
  config: small.json
  optimizer.params.lr: {type: double, minval: 0.001, maxval: 0.1, count: 100000}
  model.dropout: {type: double, minval: 0.0, maxval: 0.2, count: 100000}
  train.seed: {type: int, minval: 1, maxval: 1000000, count: 100000}
searcher: {name: grid, metric: validation_loss, max_length: {batches: 4}}
"""
open("grid_huge.yaml", "w").write(grid)
open("grid_nocount.yaml", "w").write(grid.replace(", count: 100000}", "}"))
open("int_overflow.yaml", "w").write(grid.replace("minval: 1, maxval: 1000000", "minval: -9223372036854775808, maxval: 9223372036854775807"))
single = "entrypoint: builtin:gpt2\nhyperparameters:\n  config: %s\n%s\nsearcher: {name: single, metric: validation_loss, max_length: {batches: 4}}\n"
open("wrong_config.yaml", "w").write(single % ("no-such-config.json", ""))
open("wrong_path.yaml", "w").write(single % ("small.json", "  optimizer.params.lrr: 0.01"))
open("epochs_overflow.yaml", "w").write((single % ("small.json", "")).replace("max_length: {batches: 4}", "max_length: {epochs: 4}") + "records_per_epoch: 4611686018427387904\n")
open("non_utf8.yaml", "wb").write(b"name: caf\xe9\n" + (single % ("small.json", "")).encode())
open("deep.yaml", "w").write("".join(" " * i + "- \n" for i in range(400)))
PY
for y in alias_self alias_map alias_bomb grid_huge grid_nocount int_overflow wrong_config wrong_path epochs_overflow non_utf8 deep; do
  want=$(case $y in
    alias_self|alias_map) echo "nested more than 64 deep (a self-referencing alias";;
    alias_bomb) echo "expands to more than 100000 values";;
    grid_huge) echo "more than 100000 points (searcher.max_grid_points)";;
    grid_nocount) echo "needs a 'count'";;
    int_overflow) echo "lies within +-2^53";;
    wrong_config) echo "no file .*no-such-config.json";;
    wrong_path) echo "match no key of .*'optimizer.params.lrr' (did you mean 'optimizer.params.lr'?)";;
    epochs_overflow) echo "overflows a 64-bit count of records";;
    non_utf8) echo "not UTF-8 text (an invalid byte sequence at offset 9)";;
    deep) echo "indented or nested more than 256 columns deep";; esac)
  expect "experiment create $y.yaml" "$want" "$tessera" experiment create "$y.yaml"
  case $y in wrong_path|grid_nocount|grid_huge|epochs_overflow) ;;  # (the trial alone cannot tell)
    *) expect "trial $y.yaml" "$want" "$tessera" trial "$y.yaml";; esac
done
n=$("$tessera" experiment list --json 2>/dev/null | tail -1 | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["experiments"]))')
[ "$n" = 0 ] && echo "ok   no experiment was created by any of them" || fail "$n experiments were created by invalid files"

# ---- A trial's results are its own.
cat > own.yaml <<'YAML'
name: ../escape
entrypoint: builtin:gpt2
hyperparameters: {config: small.json, optimizer.params.lr: 0.003}
searcher: {name: single, metric: validation_loss, max_length: {batches: 4}}
min_validation_period: {batches: 4}
checkpoint_storage: {host_path: hp}
YAML
"$tessera" trial own.yaml --quiet >/dev/null 2>&1 || fail "the trial of own.yaml did not train"
[ ! -e escape ] && [ -d "hp/%2E.%2Fescape/trial_1/checkpoints" ] &&
  echo "ok   name: ../escape stays one directory under host_path" ||
  fail "name: ../escape wrote outside host_path: $(ls -d escape hp/* 2>&1 | tr '\n' ' ')"
expect "rerun with other --hparams (was: 'resumed', trained nothing, exit 0, old result)" \
  "was trained with other hyperparameters: the checkpoint's .*0.003.*this trial's .*0.01" \
  "$tessera" trial own.yaml --hparams '{"optimizer.params.lr": 0.01}'
sed 's/host_path: hp/host_path: shared/; s|name: ../escape|name: same|' own.yaml > shared.yaml
TESSERA_STORE="$work/store1" "$tessera" experiment create shared.yaml --follow >/dev/null 2>&1 || fail "store1's experiment failed"
TESSERA_STORE="$work/store2" "$tessera" experiment create shared.yaml --follow >/dev/null 2>&1 || fail "store2's experiment failed"
n=$(grep -l "starting; " shared/experiment_*/trial_1/trial.log 2>/dev/null | wc -l)
[ "$n" = 2 ] && echo "ok   two stores sharing host_path: each trial trained from the start in its own directory" ||
  fail "two stores sharing host_path: $n fresh trials (one resumed the other's checkpoint?)"

# ---- Smaller wrong answers.
for v in 0 -5; do
  expect "estimate-memory --vocab $v" "--vocab must be in \[1, 2^31\]" "$tessera" estimate-memory small.json --ranks 1 --vocab "$v"
done
expect "bench gemm --shape 0,0,0 (was: ratio -nan)" "sizes must be >= 1" "$tessera" bench gemm --shape 0,0,0
TESSERA_STORE="$work/store1" "$tessera" experiment describe 1 2>/dev/null | grep -q "COMPLETED" &&
  echo "ok   experiment describe writes its table to stdout" || fail "experiment describe: no table on stdout"
config profiled "c['flops_profiler'] = {'enabled': True, 'profile_step': 3, 'output_file': 'profile.txt'}; c['train'].update({'eval_interval': 3, 'steps': 4})"
config profiled_noeval "c['flops_profiler'] = {'enabled': True, 'profile_step': 3, 'output_file': 'profile0.txt'}; c['train'].update({'eval_interval': 0, 'steps': 4})"
"$tessera" train profiled.json >/dev/null 2>&1 || fail "the profiled run failed"
"$tessera" train profiled_noeval.json >/dev/null 2>&1 || fail "the profiled run without evaluation failed"
a=$(grep "^fwd flops per GPU:" profile.txt); b=$(grep "^fwd flops per GPU:" profile0.txt)
[ -n "$a" ] && [ "$a" = "$b" ] &&
  echo "ok   the flops profile of a step with an evaluation counts its training forward only" ||
  fail "flops profile at an evaluation step (was: 3 forwards, 3x the FLOPs): '$a' against '$b' without evaluation"

echo "$fails failed"
[ "$fails" = 0 ]
