#!/usr/bin/env bash
# The CLI's answers checked against independent values, not only its exit status:
#  - eval: loss and every gradient norm of the GPT-2 and BERT fixtures against PyTorch's
#    (tests/fixtures/models/*/expected.json);
#  - generate: greedy ids against PyTorch's greedy decoding of the same model, one prompt and
#    a batch of three of different lengths (float32, and float64 on the same ids);
#  - report --json, kernels list/bench --json: the keys and values documented in docs/cli.md.
set -euo pipefail
tessera="$1"; fixtures="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
for m in gpt2-tiny bert-tiny; do
  "$tessera" eval "$fixtures/models/$m" --batch "$fixtures/models/$m/batch.json" --grads --json | tail -1 > "$work/$m.json"
done
"$tessera" generate "$fixtures/models/gpt2-tiny" --prompt-ids 1,2,3 --max-new-tokens 5 --temperature 0 --json | tail -1 > "$work/generate.json"
"$tessera" generate "$fixtures/models/gpt2-tiny" --prompt-ids "1,2,3;4,5,6,7,8;9" --max-new-tokens 5 \
  --temperature 0 --json | tail -1 > "$work/generate_batch.json"
"$tessera" generate "$fixtures/models/gpt2-tiny" --prompt-ids "1,2,3;4,5,6,7,8;9" --max-new-tokens 5 \
  --temperature 0 --dtype float64 --json | tail -1 > "$work/generate_batch64.json"
"$tessera" report --json | tail -1 > "$work/report.json"
"$tessera" --version > "$work/version.txt"
"$tessera" kernels list --json | tail -1 > "$work/list.json"
"$tessera" kernels bench matmul --shape 64,64,64 --json | tail -1 > "$work/bench.json"
python3 - "$work" "$fixtures" <<'PY'
import json, sys
work, fixtures = sys.argv[1:3]
fails = 0
def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    fails += not ok
for m in ("gpt2-tiny", "bert-tiny"):
    got, want = json.load(open(f"{work}/{m}.json")), json.load(open(f"{fixtures}/models/{m}/expected.json"))
    check(abs(got["loss"] - want["loss"]) <= 1e-5 * abs(want["loss"]),
          f"eval {m}: loss {got['loss']} vs PyTorch {want['loss']}")
    worst = max(abs(got["grad_norms"][k] - v) / (v + 1e-6) for k, v in want["grad_norms"].items()
                if v > 1e-5)
    check(set(got["grad_norms"]) == set(want["grad_norms"]) and worst <= 1e-4,
          f"eval {m}: {len(got['grad_norms'])} gradient norms by file name, worst relative {worst:.1e}")
gen, want = json.load(open(f"{work}/generate.json")), json.load(open(f"{fixtures}/models/gpt2-tiny/expected.json"))
check(gen["ids"] == want["greedy"]["ids"], f"generate greedy ids {gen['ids']} vs PyTorch {want['greedy']['ids']}")
for name in ("generate_batch", "generate_batch64"):
    got = [(o["prompt_ids"], o["ids"]) for o in json.load(open(f"{work}/{name}.json"))["outputs"]]
    ref = [(o["prompt_ids"], o["ids"]) for o in want["greedy_batch"]]
    check(got == ref, f"{name}: greedy ids of 3 prompts in one batch {got} vs PyTorch alone {ref}")
rep = json.load(open(f"{work}/report.json"))
version = open(f"{work}/version.txt").read().split()
check(version == ["tessera", rep["version"]], f"--version prints {version}, report says {rep['version']}")
check({"version", "cpu", "cuda", "devices", "mpi", "nccl"} <= set(rep) and rep["cpu"]["openmp_threads"] >= 1
      and rep["devices"][0]["device"] == "cpu", f"report --json keys {sorted(rep)}")
ops = {o["name"]: o for o in json.load(open(f"{work}/list.json"))["ops"]}
check({"matmul", "attention", "layer_norm", "cross_entropy", "adamw_step"} <= set(ops)
      and ops["matmul"]["differentiable"] and not ops["eq"]["differentiable"], f"kernels list: {len(ops)} ops")
b = json.load(open(f"{work}/bench.json"))
check(b["op"] == "matmul" and b["shape"] == [64, 64, 64] and b["ms"] > 0 and b["gflops"] > 0,
      f"kernels bench matmul: {b['ms']:.4f} ms, {b['gflops']:.1f} GFLOP/s")
sys.exit(1 if fails else 0)
PY
