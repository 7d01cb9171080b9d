#!/usr/bin/env bash
# Processes on one host share its cores (OMP_NUM_THREADS unset): two local ranks of one job take
# half each; runs started by hand find each other through the host registry
# (TESSERA_HOST_REGISTRY, here a private directory so that other tests cannot count) and
# re-divide the cores as they start and end, even when one is killed; a registry directory that
# is not private is not used; OMP_NUM_THREADS still wins.
set -uo pipefail
source "$(dirname "$0")/cli_setup.sh"
unset OMP_NUM_THREADS
export TESSERA_HOST_REGISTRY="$work/registry"
fails=0
check() {  # check NAME CONDITION-STATUS DETAIL
  if [ "$2" = 0 ]; then echo "ok   $1"; else echo "FAIL $1: $3"; fails=$((fails + 1)); fi
}
python3 - "$fixtures/train_small.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["data"]["path"] = "corpus.txt"; c["train"].update({"steps": 100000, "eval_interval": 0, "sample_tokens": 0})
c["steps_per_print"] = 1
json.dump(c, open("long.json", "w"))
PY
"$tessera" train long.json --steps 1 >/dev/null 2>&1  # tokenise once
cores=$(env -u OMP_THREAD_LIMIT nproc)
half=$(( cores / 2 > 0 ? cores / 2 : 1 ))
threads() { grep -o '"threads":[0-9]*' | cut -d: -f2 | sort -u | tr '\n' ' '; }
registered() { find registry -name 'process-*' 2>/dev/null | wc -l; }
wait_for() {  # wait_for SECONDS COMMAND...: true once COMMAND succeeds
  local until=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -lt $until ] || return 1; sleep 0.1; done
}

one=$("$tessera" train long.json --steps 1 --json 2>/dev/null | threads)
check "alone: all $cores cores, registration removed at exit" \
  "$([ "$one" = "$cores " ] && [ "$(registered)" = 0 ]; echo $?)" "threads '$one', $(registered) left"

"$tessera" train long.json > a.out 2>&1 &
a=$!
wait_for 30 grep -q "^step 3/" a.out
"$tessera" train long.json > b.out 2>&1 &
b=$!
wait_for 30 grep -q "^step 3/" b.out
beside=$("$tessera" train long.json --steps 1 --json 2>/dev/null | threads)
third=$(( cores / 3 > 0 ? cores / 3 : 1 ))
check "a third run beside two takes cores/3 = $third" "$([ "$beside" = "$third " ]; echo $?)" \
  "threads '$beside'"
if [ "$cores" -ge 2 ]; then
  # Runs re-count each second: the first one says on its progress line that it gave cores up.
  wait_for 10 grep -q "thread(s): cores shared with other runs" a.out
  check "the running one gives up cores when others start" $? "$(tail -2 a.out)"
fi
kill -9 $b; wait $b 2>/dev/null
if [ "$cores" -ge 2 ]; then
  # ... and takes them back when the other is gone (killed: its lock died with it).
  lines=$(wc -l < a.out)
  took_back() { tail -n +$((lines + 1)) a.out | grep "^step" | tail -1 | grep -qv "cores shared"; }
  wait_for 30 took_back
  check "and takes them back when the other is killed" $? "$(tail -2 a.out)"
fi
kill -9 $a; wait $a 2>/dev/null
after=$("$tessera" train long.json --steps 1 --json 2>/dev/null | threads)
check "after both were killed: all cores again, their files removed" \
  "$([ "$after" = "$cores " ] && [ "$(registered)" = 0 ]; echo $?)" "threads '$after', $(registered) left"

mkdir -m 0777 open
open_run=$(TESSERA_HOST_REGISTRY="$work/open" "$tessera" train long.json --steps 1 --json 2>/dev/null | threads)
check "a registry directory others may write is not used" \
  "$([ "$open_run" = "$cores " ] && [ -z "$(ls -A open)" ]; echo $?)" "threads '$open_run', $(ls -A open)"

two=$(mpirun -np 2 "$tessera" train long.json --steps 1 --json 2>/dev/null | threads)
set3=$(OMP_NUM_THREADS=3 mpirun -np 2 "$tessera" train long.json --steps 1 --json 2>/dev/null | threads)
check "2 local ranks take half ($half) each; OMP_NUM_THREADS=3 wins" \
  "$([ "$two" = "$half " ] && [ "$set3" = "3 " ]; echo $?)" "ranks '$two', OMP_NUM_THREADS=3 '$set3'"
echo "$fails failed"
[ "$fails" = 0 ]
