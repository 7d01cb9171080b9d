#!/usr/bin/env bash
# GPU benchmarks (not tests), with every ceiling measured in the same run:
#  1. memory-bound kernels' GB/s (bytes read + written) over our own device-to-device copy;
#  2. matmul TFLOP/s (cuBLASLt through Tessera) over PyTorch's (cuBLAS) on the same shapes;
#  3. block-sparse attention (DeepSpeed's fixed layout) beside the dense flash attention, bf16;
#  4. GPT-2 124M training step (bf16, context 1024) tokens/s and MFU beside PyTorch eager.
# Usage: scripts/gpu_bench.sh TESSERA_BINARY OUT_DIR (scripts/gpu_run.sh bench calls it).
set -uo pipefail
ts="$1"; out="$2"
here="$(cd "$(dirname "$0")" && pwd)"
py=python3
log="$out/gpu_bench.jsonl"; : > "$log"
kb() {  # op shape dtype
  "$ts" kernels bench "$1" --device cuda --shape "$2" --dtype "$3" --iters 30 --json | tail -1 | tee -a "$log"
}
big=67108864  # 2^26 elements: 256 MB in float32, far past the 50 MB L2
echo "--- memory-bound kernels (GB/s over clone's)"
for dt in float32 bfloat16; do
  copy=$(kb clone "$big" "$dt")
  for spec in "add $big" "mul $big" "exp $big" "gelu $big" "dropout $big" "sum $big" \
              "softmax 65536,1024" "layer_norm 65536,768" "cross_entropy 8192,50304" \
              "embedding 50304,768,65536"; do
    set -- $spec
    r=$(kb "$1" "$2" "$dt")
    $py - "$copy" "$r" <<'PY'
import json, sys
c, r = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"  {r['op']:<14} {r['dtype']:<9} {str(r['shape']):<22} {r['gbps']:8.0f} GB/s  {r['gbps'] / c['gbps']:5.2f}x of copy ({c['gbps']:.0f} GB/s)")
PY
  done
done
echo "--- matmul (TFLOP/s, Tessera/cuBLASLt vs PyTorch/cuBLAS)"
for dt in bfloat16 float16 float32; do
  for shape in 8192,8192,8192 4096,4096,4096 8192,2304,768 8192,768,3072 8192,50304,768; do
    r=$(kb matmul "$shape" "$dt")
    p=$($py "$here/gpu_reference.py" matmul --shape "$shape" --dtype "$dt" | tail -1 | tee -a "$log")
    $py - "$r" "$p" <<'PY'
import json, sys
r, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"  {r['dtype']:<9} {str(r['shape']):<22} tessera {r['gflops'] / 1e3:7.1f}  pytorch {p['tflops']:7.1f}  ratio {r['gflops'] / 1e3 / p['tflops']:5.2f}")
PY
  done
done
echo "--- block-sparse attention, bf16, forward + backward (fixed layout over dense flash)"
"$ts" bench sparse-attention --device cuda --dtype bfloat16 --batch 4 --heads 12 --iters 10 \
  | sed 's/^/  sparse /'
echo "--- GPT-2 124M training step, bf16, context 1024"
for b in 8 16; do
  t=$("$ts" bench train --preset gpt2-1024 --device cuda --dtype bfloat16 --batch "$b" --json | tail -1 | tee -a "$log")
  p=$($py "$here/gpu_reference.py" train --batch "$b" | tail -1 | tee -a "$log")
  $py - "$t" "$p" <<'PY'
import json, sys
t, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"  batch {t['batch']:>2}: tessera {t['tokens_per_s']:9.0f} tok/s (MFU {t['mfu']:.3f}, {t['ms_per_step']:.1f} ms)"
      f"  pytorch eager {p['tokens_per_s']:9.0f} tok/s (MFU {p['mfu']:.3f}, {p['ms_per_step']:.1f} ms)"
      f"  ratio {t['tokens_per_s'] / p['tokens_per_s']:.2f}")
PY
done
# torch.compile at the larger batch only: Inductor's compilation takes about a minute.
t=$("$ts" bench train --preset gpt2-1024 --device cuda --dtype bfloat16 --batch 16 --json | tail -1)
p=$($py "$here/gpu_reference.py" train --batch 16 --compile | tail -1 | tee -a "$log")
$py - "$t" "$p" <<'PY'
import json, sys
t, p = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"  batch {t['batch']:>2}: tessera {t['tokens_per_s']:9.0f} tok/s (MFU {t['mfu']:.3f}, {t['ms_per_step']:.1f} ms)"
      f"  torch.compile {p['tokens_per_s']:9.0f} tok/s (MFU {p['mfu']:.3f}, {p['ms_per_step']:.1f} ms)"
      f"  ratio {t['tokens_per_s'] / p['tokens_per_s']:.2f}")
PY
