#!/usr/bin/env bash
# Preemption of a trial: SIGTERM at a random moment, then the same command again, gives the
# uninterrupted run's every training loss and final validation metrics bit for bit:
# examples/trial_mlp.cpp (a Trial) on 1 slot and on 2 (mpirun; the signal reaches one rank,
# as a scheduler's would reach the job's processes one by one), and
# examples/trial_deepspeed_gpt.cpp (a DeepSpeedTrial over the engine) on 1 slot.
set -euo pipefail
mlp="$1"; mlp_yaml="$2"; gpt="$3"; gpt_yaml="$4"
work="$(mktemp -d)"; trap 'pkill -9 -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
cp "$mlp" "$work/trial-mlp"; cp "$gpt" "$work/trial-gpt"  # so pkill -f "$work" finds them

config() {  # name slots: a longer run of the example's experiment
  if [ "$exe" = trial-mlp ]; then
    sed -e "s/^name: .*/name: $1/" -e "s/batches: 300/batches: $batches/" -e "s/hidden: 32/hidden: 512/" \
        -e "s/slots_per_trial: 1/slots_per_trial: $2/" "$mlp_yaml" > "$work/$1.yaml"
  else
    sed -e "s/^name: .*/name: $1/" -e "s/batches: 60/batches: $batches/" \
        -e "s/slots_per_trial: 1/slots_per_trial: $2/" "$gpt_yaml" > "$work/$1.yaml"
  fi
}
launch() {  # name slots
  if [ "$2" = 1 ]; then "$work/$exe" "$work/$1.yaml" --json
  else mpirun -np "$2" "$work/$exe" "$work/$1.yaml" --json; fi
}
compare() {  # straight resumed
  python3 - "$work/checkpoints/$1/trial_1/metrics.jsonl" "$work/checkpoints/$2/trial_1/metrics.jsonl" \
    "$work/$1.out" "$work/$2.out" "$3" <<'PY'
import json, sys
def losses(path):  # every reported loss (each batch's, or micro-batch's), in order
    return [m["loss"] for line in open(path) if json.loads(line)["type"] == "training"
            for m in json.loads(line)["batch_metrics"]]
def final(path):
    return json.loads([l for l in open(path) if l.startswith("{")][-1])
a, b = losses(sys.argv[1]), losses(sys.argv[2])
fa, fb = final(sys.argv[3]), final(sys.argv[4])
ok = a == b and len(a) == int(sys.argv[5]) and fa["validation_metrics"] == fb["validation_metrics"] \
    and fb["state"] == "COMPLETED"
print(f"  {len(a)} batch losses equal: {a == b}; final validation equal: "
      f"{fa['validation_metrics'] == fb['validation_metrics']} ({fb['validation_metrics']})")
sys.exit(0 if ok else 1)
PY
}

cd "$work"
runs=("trial-mlp 1 12000 12000" "trial-mlp 2 12000 12000" "trial-gpt 1 600 1200")
# Under the sanitizers (10x slower) a tenth of the batches keeps each run a few seconds long,
# and the MLP runs on 2 slots only (1 slot is the same code without the collectives).
[ -z "${TESSERA_SANITIZER_SUBSET:-}" ] ||
  runs=("trial-mlp 2 1200 1200" "trial-gpt 1 60 120")
for run in "${runs[@]}"; do
  read -r exe slots batches reported <<<"$run"
  config "${exe}-straight$slots" "$slots"
  start=$(date +%s%N)
  launch "${exe}-straight$slots" "$slots" > "$work/${exe}-straight$slots.out"
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  config "${exe}-stopped$slots" "$slots"
  stopped=0
  # A signal after the run ended stops nothing, one before the program installed its
  # handlers kills it (nothing saved): both are tried again at another random moment.
  for attempt in 1 2 3 4 5 6 7 8; do
    rm -rf "$work/checkpoints/${exe}-stopped$slots"
    delay=$(python3 -c "import random; print(random.uniform(0.2, 0.8) * $ms / 1000)")
    launch "${exe}-stopped$slots" "$slots" > "$work/${exe}-stopped$slots.first" 2>&1 & job=$!
    sleep "$delay"
    # The newest process of the command: the trial itself, or the last rank under mpirun.
    pkill -TERM -n -f "^$work/$exe $work/${exe}-stopped$slots.yaml" || true
    if ! wait "$job"; then
      [ -e "$work/checkpoints/${exe}-stopped$slots/trial_1/checkpoints.json" ] ||
        { echo "  (attempt $attempt: the signal came before the program started)"; continue; }
      echo "the stopped run failed:"; cat "$work/${exe}-stopped$slots.first"; exit 1
    fi
    if grep -q '"state":"STOPPED"' "$work/${exe}-stopped$slots.first"; then stopped=1; break; fi
  done
  [ "$stopped" = 1 ] || { echo "$exe, $slots slot(s): no SIGTERM arrived during training in 8 tries"; exit 1; }
  at=$(grep -o '"batches":[0-9]*' "$work/${exe}-stopped$slots.first" | tail -1)
  echo "$exe, $slots slot(s): SIGTERM after ${delay}s of a ${ms} ms run: stopped with $at; rerun:"
  launch "${exe}-stopped$slots" "$slots" > "$work/${exe}-stopped$slots.out"
  compare "${exe}-straight$slots" "${exe}-stopped$slots" "$reported"
done
