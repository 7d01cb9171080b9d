#!/usr/bin/env bash
# Tessera's training step beside PyTorch's (../shared/reference/gpt_bench.py, its best thread
# setting) for the tiny, small and gpt2 presets, in one run on this machine. Needs
# python3-torch (sudo apt-get install python3-torch libopenblas0-pthread).
set -euo pipefail
cd "$(dirname "$0")/.."
ref="${TESSERA_SHARED:-../shared}/reference/gpt_bench.py"
presets="${*:-tiny small gpt2}"
[ -f "$ref" ] || { echo "bench_train.sh: no PyTorch reference at $ref (set TESSERA_SHARED to the directory holding reference/gpt_bench.py; \`tessera bench train\` alone needs none)" >&2; exit 2; }
printf "%-6s %14s %14s %8s\n" preset "tessera ms" "pytorch ms" speedup
for p in $presets; do
  ts=$(./build/tools/tessera bench train --preset "$p" --json | tail -1)
  pt=$(/usr/bin/python3 "$ref" --preset "$p" | tail -1)
  python3 - "$p" "$ts" "$pt" <<'PY'
import json, sys
p, ts, pt = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
print(f"{p:<6} {ts['ms_per_step']:14.1f} {pt['ms_per_step']:14.1f} {pt['ms_per_step'] / ts['ms_per_step']:7.2f}x")
PY
done
