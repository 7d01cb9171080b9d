#!/usr/bin/env bash
# The docs' tables generated from the registries are current: every block between
# "<!-- tessera CMD --markdown -->" and "<!-- end -->" in docs/*.md equals `tessera CMD
# --markdown` (models: the model registry; optimizers, schedules, pipeline-schedules,
# monitors, searchers: the optimizer, LR schedule, pipeline schedule, monitor and searcher
# registries; config-keys: the config reader's own record of every key).
set -euo pipefail
tessera="$1" root="$2"
found=0
for doc in "$root"/docs/*.md; do
  for cmd in $(sed -n 's/^<!-- tessera \([a-z-]*\) --markdown -->$/\1/p' "$doc"); do
    found=$((found + 1))
    if ! diff <(sed -n "/^<!-- tessera $cmd --markdown -->\$/,/^<!-- end -->\$/p" "$doc" | sed '1d;$d') \
              <("$tessera" "$cmd" --markdown); then
      echo "$(basename "$doc"): the table differs from \`tessera $cmd --markdown\`: regenerate it"
      exit 1
    fi
  done
done
[ "$found" -ge 7 ] || { echo "expected the models, optimizers, schedules, pipeline-schedules, monitors, searchers and config-keys tables in docs/, found $found"; exit 1; }
# --json: one object whose list names the same entries, in the same order, as the table's first
# column (the --json of each listing command is the contract scripts read).
for cmd in models optimizers schedules pipeline-schedules monitors searchers config-keys; do
  "$tessera" "$cmd" --json | tail -1 | python3 -c '
import json, sys
cmd, table = sys.argv[1], sys.argv[2]
d = json.load(sys.stdin)
key = cmd.replace("-", "_")
assert list(d) == [key], f"{cmd} --json: keys {list(d)}, expected [{key!r}]"
types = [e.get("type", e.get("key")) for e in d[key]]
rows = [line.split("|")[1].strip().strip("`") for line in table.splitlines()[2:]]
firsts = [r for i, r in enumerate(rows) if r not in rows[:i]]
assert types == firsts, f"{cmd}: --json lists {types}, the table {firsts}"
' "$cmd" "$("$tessera" "$cmd" --markdown)" || { echo "tessera $cmd --json disagrees with its table"; exit 1; }
done
echo "ok: $found generated tables current; every listing's --json names the table's entries"
