#!/usr/bin/env bash
# GPU inference check: `tessera generate` on CUDA gives the CPU's float32 greedy ids (one
# prompt, 28 new tokens to the fixture's 32-position context, and a batch of three prompts of
# different lengths), and bf16 runs; prints tokens/s. Usage: scripts/gpu_generate.sh
# TESSERA_BINARY MODEL_DIR
set -uo pipefail
ts="$1"; model="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
status=0
for run in "one:1,2,3" "batch:1,2,3;4,5,6,7,8;9"; do
  name="${run%%:*}" ids="${run#*:}"
  for dev in "cpu float32" "cuda float32" "cuda bfloat16"; do
    set -- $dev
    "$ts" generate "$model" --prompt-ids "$ids" --max-new-tokens 28 --temperature 0 \
      --device "$1" --dtype "$2" --json 2>"$work/err" | tail -1 > "$work/$name-$1-$2.json" ||
      { echo "generate $name on $1 $2 failed: $(tail -2 "$work/err")"; status=1; }
  done
done
python3 - "$work" <<'PY' || status=1
import json, sys
work = sys.argv[1]
def ids(path):
    j = json.load(open(path))
    return [o["ids"] for o in j["outputs"]] if "outputs" in j else [j["ids"]], j["tokens_per_s"]
bad = 0
for name in ("one", "batch"):
    cpu, _ = ids(f"{work}/{name}-cpu-float32.json")
    gpu, rate = ids(f"{work}/{name}-cuda-float32.json")
    bf16, rate16 = ids(f"{work}/{name}-cuda-bfloat16.json")
    same = sum(a == b for r, s in zip(cpu, bf16) for a, b in zip(r, s))
    print(f"generate {name}: cuda float32 ids {'equal' if gpu == cpu else 'DIFFER from'} the CPU's"
          f" ({sum(map(len, cpu))} tokens, {rate:.0f} tok/s); bf16 {same}/{sum(map(len, cpu))} equal,"
          f" {rate16:.0f} tok/s")
    bad += gpu != cpu
raise SystemExit(1 if bad else 0)
PY
exit $status
