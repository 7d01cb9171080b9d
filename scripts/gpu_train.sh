#!/usr/bin/env bash
# `tessera train` on a GPU the way a user runs it: the quickstart config with --device cuda,
# float32 and then bf16 (configs/quickstart.json plus "bf16": {"enabled": true}), on the
# README as a small corpus. Usage: scripts/gpu_train.sh TESSERA_BINARY OUT_DIR
set -uo pipefail
ts="$1"; out="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
corpus="$(mktemp -d)/corpus.txt"
cat "$root"/README.md "$root"/configs/*.json > "$corpus"
python3 - "$root/configs/quickstart.json" "$out/quickstart_bf16.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["bf16"] = {"enabled": True}; c.pop("fp16", None)
json.dump(c, open(sys.argv[2], "w"))
PY
for cfg in "$root/configs/quickstart.json" "$out/quickstart_bf16.json"; do
  echo "--- $(basename "$cfg") on cuda"
  "$ts" train "$cfg" --device cuda --data "$corpus" --steps 300 --json 2>&1 | tail -4
done
