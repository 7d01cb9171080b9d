#!/usr/bin/env bash
# `tessera experiment` end to end, on the test GPT-2 (tests/fixtures/corpus.txt as its corpus):
#  1. adaptive ASHA over lr and dropout, 6 trials on 2 slots: every trial ends COMPLETED, the
#     trials the searcher stopped early ran fewer batches, and only up to a rung (8 or 16 of
#     32); the same YAML again gives the same samples, the same stops and the same metrics
#     (seeded); `best` names a checkpoint that exists; the store is sound.
#  2. Fault tolerance, against an uninterrupted run of one trial (400 batches): kill -9 of the
#     trial mid-run (restarted from its checkpoint: restarts 1, the same validations bit for
#     bit); kill -9 of the runner (its trial checkpoints and stops; `resume` continues it to
#     the same validations); pause (the trial stops with a checkpoint, PAUSED) and activate
#     (the same validations again); kill (CANCELED).
#  3. A trial that always fails ends ERROR after max_restarts restarts, its log kept; a trial
#     of 2 slots runs under mpirun; the same config as a tensor-parallel pair, a 2-stage
#     pipeline and 3D (2 stages x 2 tensor-parallel ranks, 4 slots) validates as the
#     data-parallel pair does.
set -euo pipefail
# Under the sanitizers' subset the experiment end to end (minutes of trials) is left to the
# release pass; the runner and store still run under ASan in cli-experiment-serve, -browser and
# cli-hostile-input, and `scripts/test.sh --full` runs this here too.
if [ -n "${TESSERA_SANITIZER_SUBSET:-}" ]; then
  echo "skipped under the sanitizers' subset (the release pass runs it; --full runs it here)"
  exit 77
fi
tessera="$(realpath "$1")"; fixtures="$(realpath "$2")"
work="$(mktemp -d)"; trap 'pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
source "$(dirname "$0")/experiment_setup.sh"
python3 - <<'PY'
common = """entrypoint: builtin:gpt2
min_validation_period:
  batches: {period}
min_checkpoint_period:
  batches: {period}
scheduling_unit: 8
max_restarts: {restarts}
resources:
  max_slots: 2
  slots_per_trial: {slots}
reproducibility:
  experiment_seed: 3
"""
asha = """name: asha
hyperparameters:
  config: small.json
  train.eval_iters: 2
  optimizer.params.lr: {type: log, minval: -3.5, maxval: -1.5}
  model.dropout: {type: double, minval: 0.0, maxval: 0.2}
searcher:
  name: adaptive_asha
  metric: validation_loss
  max_trials: 6
  max_length: {batches: 32}
  divisor: 2
  max_rungs: 3
  max_concurrent_trials: 2
""" + common.format(period=8, restarts=5, slots=1)
single = """name: single
hyperparameters:
  config: %s
  train.eval_iters: 2
searcher:
  name: single
  metric: validation_loss
  max_length: {batches: %d}
"""
open("asha.yaml", "w").write(asha)
open("tpe.yaml", "w").write(asha.replace("name: asha", "name: tpe").replace(
    "name: adaptive_asha", "name: tpe\n  n_startup_trials: 3"))
# Only the experiment's best checkpoint survives (trial directories under host_path).
open("gc.yaml", "w").write(asha.replace("name: asha", "name: gc").replace("max_trials: 6", "max_trials: 4")
    + "checkpoint_storage:\n  host_path: ckpts\n  save_experiment_best: 1\n"
    + "  save_trial_best: 0\n  save_trial_latest: 0\n")
open("single.yaml", "w").write(single % ("small.json", 400) + common.format(period=40, restarts=5, slots=1))
# (A config that parses, so the experiment is created, whose corpus is not there: every trial fails.)
import json
broken = json.load(open("small.json")); broken["data"]["path"] = "missing-corpus.txt"
json.dump(broken, open("broken.json", "w"))
open("broken.yaml", "w").write(single % ("broken.json", 400) + common.format(period=40, restarts=2, slots=1))
open("two.yaml", "w").write(single % ("small.json", 40) + common.format(period=20, restarts=0, slots=2))
for name, section, slots in (("tp2", {"tensor_parallel": {"autotp_size": 2}}, 2),
                            ("pp2", {"pipeline": {"stages": 2}}, 2),
                            ("3d", {"tensor_parallel": {"autotp_size": 2}, "pipeline": {"stages": 2}}, 4)):
    json.dump(dict(json.load(open("small.json")), **section), open(f"small_{name}.json", "w"))
    open(f"{name}.yaml", "w").write((single % (f"small_{name}.json", 40)).replace("name: single", f"name: {name}", 1)
                                    + common.format(period=20, restarts=0, slots=slots).replace(
                                        "max_slots: 2", f"max_slots: {max(slots, 2)}"))
PY

describe() { "$tessera" experiment describe "$1" --json 2>/dev/null | tail -1; }
# Waits until experiment $1's trial 1 has reported $2 training batches.
wait_batches() {
  for _ in $(seq 600); do
    if python3 -c "
import json, sys; d = json.loads(sys.argv[1]); t = d['trials']
sys.exit(0 if t and t[0]['batches'] >= $2 else 1)" "$(describe "$1")" 2>/dev/null; then return 0; fi
    sleep 0.05
  done
  echo "experiment $1 never reached $2 batches"; exit 1
}
wait_state() {  # experiment state
  for _ in $(seq 1200); do
    [ "$(describe "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')" = "$2" ] && return 0
    sleep 0.05
  done
  echo "experiment $1 never became $2"; describe "$1"; exit 1
}

# 1. ASHA, twice.
"$tessera" experiment create asha.yaml --follow --json > asha1.out 2> asha1.err
"$tessera" experiment create asha.yaml --follow --json > asha2.out 2> asha2.err
"$tessera" experiment best 1 > best.out
python3 - <<'PY'
import json, os
a, b = (json.loads(open(f).read().splitlines()[-1]) for f in ("asha1.out", "asha2.out"))
assert a["state"] == "COMPLETED" and len(a["trials"]) == 6, a
assert all(t["state"] == "COMPLETED" and t["restarts"] == 0 for t in a["trials"]), a
lengths = sorted(t["batches"] for t in a["trials"])
assert lengths[0] < 32 and set(lengths) <= {8, 16, 32}, lengths
key = lambda d: [(t["hparams"], t["batches"], t["best_validation"]) for t in d["trials"]]
assert key(a) == key(b), "the same experiment seed gave another search"
best = open("best.out").read().split()[0]
assert os.path.isdir(best), best
print(f"ASHA: 6 trials, batches {lengths}; repeated exactly; best checkpoint {best}")
PY
grep -q "stopped by the searcher at 8 batches\|stopped by the searcher at 16 batches" asha1.err ||
  { echo "no early stop in the runner's log:"; cat asha1.err; exit 1; }

"$tessera" experiment create tpe.yaml --follow --json > tpe.out 2> tpe.err         # 3
python3 - <<'PY'
import json
d = json.loads(open("tpe.out").read().splitlines()[-1])
assert d["state"] == "COMPLETED" and len(d["trials"]) == 6, d
assert all(t["batches"] == 32 and 10**-3.5 <= t["hparams"]["optimizer.params.lr"] <= 10**-1.5
           for t in d["trials"]), d
print("TPE: 6 trials of 32 batches, the last 3 suggested from the first ones")
PY
"$tessera" experiment create gc.yaml --follow --json > gc.out 2> gc.err           # 4
# (Trials' files are named by the experiment's UUID, not its name or id.)
uuid=$(python3 -c 'import json; print(json.load(open("'"$TESSERA_STORE"'/experiment_4/experiment.json"))["uuid"])')
kept=$(find "ckpts/experiment_$uuid" -mindepth 3 -maxdepth 3 -path '*/checkpoints/*' | sort)
[ "$(echo "$kept" | wc -l)" = 1 ] && [ "$(realpath "$kept")" = "$("$tessera" experiment best 4)" ] ||
  { echo "save_experiment_best 1 kept: $kept"; exit 1; }
echo "save_experiment_best 1: only $kept is left"

# 2. One trial uninterrupted, then with its process killed, its runner killed, paused.
"$tessera" experiment create single.yaml --follow --json > ref.out 2> ref.err        # 5
"$tessera" experiment create single.yaml --json > /dev/null 2>&1                     # 6
wait_batches 6 80
pkill -9 -f "trial-dir $TESSERA_STORE/experiment_6/trial_1" || { echo "no trial process to kill"; exit 1; }
wait_state 6 COMPLETED
"$tessera" experiment create single.yaml --json > /dev/null 2>&1                     # 7
wait_batches 7 80
pkill -9 -f "experiment resume 7 --store" || { echo "no runner to kill"; exit 1; }
"$tessera" experiment resume 7 --follow --json > resumed.out 2> resumed.err ||
  { echo "resume failed:"; cat resumed.err; exit 1; }
"$tessera" experiment create single.yaml --json > /dev/null 2>&1                     # 8
wait_batches 8 80
"$tessera" experiment pause 8 > pause.out 2>&1 || { echo "pause failed:"; cat pause.out; exit 1; }
for _ in $(seq 600); do
  describe 8 | grep -q '"state":"PAUSED","trials":\[{.*"state":"PAUSED"' && break; sleep 0.05
done
describe 8 | grep -q '"state":"PAUSED"' || { echo "pause did not pause"; describe 8; exit 1; }
paused=$(describe 8 | python3 -c 'import json,sys; print(json.load(sys.stdin)["trials"][0]["batches"])')
sleep 1
now=$(describe 8 | python3 -c 'import json,sys; print(json.load(sys.stdin)["trials"][0]["batches"])')
[ "$now" = "$paused" ] || { echo "a paused trial went on: $paused -> $now batches"; exit 1; }
"$tessera" experiment activate 8 > /dev/null 2>&1
wait_state 8 COMPLETED
"$tessera" experiment create single.yaml --json > /dev/null 2>&1                     # 9
wait_batches 9 40
"$tessera" experiment kill 9 > kill.out 2>&1 || { echo "kill failed:"; cat kill.out; exit 1; }
wait_state 9 CANCELED
python3 - "$TESSERA_STORE" <<'PY'
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1] + "/experiments.db")
def validations(e):
    return [json.loads(m)["validation_loss"] for (m,) in db.execute(
        "SELECT m.metrics FROM metrics m JOIN trials t ON m.trial_id = t.id "
        "WHERE t.experiment_id = ? AND m.kind = 'validation' ORDER BY m.batches", (e,))]
ref = validations(5)
assert len(ref) == 10, ref
for e, what, restarts in ((6, "trial killed -9", 1), (7, "runner killed -9", 0),
                          (8, "paused and activated", 0)):
    (state, r), = db.execute("SELECT state, restarts FROM trials WHERE experiment_id = ?", (e,))
    got = validations(e)
    assert state == "COMPLETED" and r == restarts and got == ref, (e, what, state, r, got, ref)
    print(f"{what}: {len(got)} validations equal to the uninterrupted run's, restarts {r}")
(state,), = db.execute("SELECT state FROM trials WHERE experiment_id = 9")
assert state == "CANCELED", state
assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
PY

# 3. A failing trial; two slots.
if "$tessera" experiment create broken.yaml --follow > broken.out 2> broken.err; then
  echo "broken.yaml completed"; exit 1
fi
grep -q "after 2 restarts (max_restarts): ERROR" broken.err
broken=$(describe 10 | python3 -c 'import json,sys; print(json.load(sys.stdin)["trials"][0]["id"])')
"$tessera" experiment logs "$broken" | grep -q "missing-corpus.txt"
"$tessera" experiment create two.yaml --follow --json > two.out 2> two.err
grep -q '"state":"COMPLETED"' two.out
grep -q "on 2 slot(s)" "$TESSERA_STORE/experiment_11/trial_1/trial.log"
for layout in tp2 pp2 3d; do
  "$tessera" experiment create $layout.yaml --follow --json > $layout.out 2> $layout.err ||
    { echo "$layout.yaml failed"; cat $layout.err; exit 1; }
done
python3 - "$(describe 11)" "$(describe 12)" "$(describe 13)" "$(describe 14)" <<'PY'
import json, sys
dp, tp, pp, td = (json.loads(a)["trials"][0] for a in sys.argv[1:5])
want = dp["latest_validation"]["validation_loss"]
for name, t in (("tensor-parallel", tp), ("pipeline", pp), ("3D (2 stages x 2 tensor-parallel, 4 slots)", td)):
    got = t["latest_validation"]["validation_loss"]
    assert t["state"] == "COMPLETED" and t["batches"] == dp["batches"] == 40, (name, t["state"], t["batches"])
    assert t["hparams"]["config"] != dp["hparams"]["config"], t["hparams"]
    assert abs(got - want) <= 1e-5 * abs(want), (name, got, want)
    print(f"experiment as a {name} job: validation {got} vs the data-parallel pair's {want}")
PY
"$tessera" experiment list
echo ok
