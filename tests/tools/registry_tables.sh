#!/usr/bin/env bash
# The docs' tables generated from the registries are current: every block between
# "<!-- tessera CMD --markdown -->" and "<!-- end -->" in docs/*.md equals `tessera CMD
# --markdown` (models: the model registry; optimizers, schedules, pipeline-schedules,
# monitors, searchers: the optimizer, LR schedule, pipeline schedule, monitor and searcher
# registries).
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
[ "$found" -ge 6 ] || { echo "expected the models, optimizers, schedules, pipeline-schedules, monitors and searchers tables in docs/, found $found"; exit 1; }
echo "ok: $found generated tables current"
