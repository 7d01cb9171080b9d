#!/usr/bin/env bash
# Tessera's training step beside PyTorch's (../shared/reference/gpt_bench.py, its best thread
# setting) for the tiny, small and gpt2 presets, in one run on this machine. Needs
# python3-torch (sudo apt-get install python3-torch libopenblas0-pthread).
# Also in the same run: this machine's float32 GEMM rate (OpenBLAS's own cblas_sgemm at
# 2048^3 on all its threads, `tessera bench gemm`), each step's model FLOP/s (6N + 12LTd per
# token) as a share of it, and the speedup over PyTorch a step would reach if all its FLOPs ran
# at that rate and nothing else took time (the ceiling for this machine).
set -euo pipefail
cd "$(dirname "$0")/.."
ref="${TESSERA_SHARED:-../shared}/reference/gpt_bench.py"
presets="${*:-tiny small gpt2}"
[ -f "$ref" ] || { echo "bench_train.sh: no PyTorch reference at $ref (set TESSERA_SHARED to the directory holding reference/gpt_bench.py; \`tessera bench train\` alone needs none)" >&2; exit 2; }
gemm=$(./build/tools/tessera bench gemm --shape 2048,2048,2048 --iters 5 --json | tail -1)
printf "%-6s %12s %12s %8s %9s %8s %9s\n" preset "tessera ms" "pytorch ms" speedup "GFLOP/s" "of GEMM" ceiling
for p in $presets; do
  ts=$(./build/tools/tessera bench train --preset "$p" --json | tail -1)
  pt=$(/usr/bin/python3 "$ref" --preset "$p" | tail -1)
  python3 - "$p" "$ts" "$pt" "$gemm" <<'PY'
import json, sys
p, ts, pt, gemm = sys.argv[1], *(json.loads(a) for a in sys.argv[2:])
peak = gemm["results"][0]["openblas_gflops"]
gflops = ts["model_tflops"] * 1e3
floor_ms = ts["ms_per_step"] * gflops / peak  # the step's FLOPs at the GEMM rate
print(f"{p:<6} {ts['ms_per_step']:12.1f} {pt['ms_per_step']:12.1f} {pt['ms_per_step'] / ts['ms_per_step']:7.2f}x "
      f"{gflops:9.1f} {gflops / peak:7.0%} {pt['ms_per_step'] / floor_ms:8.2f}x")
PY
done
python3 -c "import json,sys; print(f\"GEMM rate (OpenBLAS sgemm 2048^3): {json.loads(sys.argv[1])['results'][0]['openblas_gflops']:.1f} GFLOP/s\")" "$gemm"
