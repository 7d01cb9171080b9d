#!/usr/bin/env bash
# Runs on a GPU machine from the repository root: unpacks .gpu/bundle.tar.xz (made here by
# scripts/gpu_bundle.sh), finds the CUDA libraries wherever that machine keeps them, then runs
# the stages named (default: all but profile and sparse): probe, tests, check, generate, bench,
# train, profile, sparse (block-sparse attention alone: its CUDA cases and its benchmark).
# Logs go to $OUT if set.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
out="${OUT:-/tmp/tessera-gpu-out}"
mkdir -p "$out"
work=/tmp/tessera-gpu
rm -rf "$work" && mkdir -p "$work" && tar -C "$work" -xJf .gpu/bundle.tar.xz || exit 1
libdirs="$work/lib"
for lib in libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  found="$( (ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}'; \
            find /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/lib /opt /usr/local/lib -name "$lib" 2>/dev/null) | head -1)"
  [ -n "$found" ] && libdirs="$libdirs:$(dirname "$found")"
  echo "located $lib: ${found:-NOT FOUND}"
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
export TESSERA_FIXTURES_DIR="$root/tests/fixtures"
ts="$work/build/tools/tessera"
stages="${*:-probe tests check generate bench train}"
status=0
failed=()
for stage in $stages; do
  echo "=== $stage"
  case "$stage" in
    probe)
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
      nvcc --version | tail -1; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
      ldd "$work"/build/libtessera.so.* | grep -E "not found|cuda|cublas|cudnn|nccl"
      "$ts" report --json | tee "$out/report.json" ;;
    tests)
      # The CUDA suite, then every other suite's CUDA and NCCL cases (named "...cuda...",
      # "NCCL: ..."; NCCL runs as one rank on one GPU there).
      "$work/build/tests/test-backends-cuda" 2>&1 | tee "$out/test-backends-cuda.log" | tail -30
      [ "${PIPESTATUS[0]}" = 0 ] || { status=1; failed+=("tests:test-backends-cuda"); }
      for t in "$work"/build/tests/test-*; do
        [ "$(basename "$t")" = test-backends-cuda ] && continue
        "$t" -tc='*cuda*,*NCCL*' 2>&1 | tee "$out/$(basename "$t").log" | grep -E "FAIL|ERROR|test cases" | tail -30
        rc="${PIPESTATUS[0]}"  # 77: every case skipped (no CUDA or NCCL case in that suite)
        [ "$rc" = 0 ] || [ "$rc" = 77 ] || { status=1; failed+=("tests:$(basename "$t")"); }
      done ;;
    check)
      "$ts" kernels check --device cuda 2>&1 | tee "$out/kernels_check.log" | tail -80
      [ "${PIPESTATUS[0]}" = 0 ] || { status=1; failed+=("check"); } ;;
    bench) bash scripts/gpu_bench.sh "$ts" "$out" 2>&1 | tee "$out/bench.log"
      [ "${PIPESTATUS[0]}" = 0 ] || { status=1; failed+=("bench"); } ;;
    profile)  # device time per kernel in a GPT-2 124M bf16 step (each kernel waited for)
      TESSERA_PROFILE=1 "$ts" bench train --preset gpt2-1024 --device cuda --dtype bfloat16 \
        --iters 3 2>&1 | tee "$out/profile.log" | tail -40 ;;
    sparse)  # block-sparse attention: the CUDA cases (tensor-core and warp kernels), then speed
      "$work/build/tests/test-backends-cuda" -tc='*block-sparse*' 2>&1 | tee "$out/sparse.log" | tail -20
      [ "${PIPESTATUS[0]}" = 0 ] || { status=1; failed+=("sparse"); }
      "$ts" bench sparse-attention --device cuda --dtype bfloat16 --batch 4 --heads 12 --iters 10 \
        2>&1 | tee -a "$out/sparse.log" | sed 's/^/  sparse /' ;;
    generate)  # GPU inference: the tiny GPT-2 fixture's greedy ids on cuda equal the CPU's
      bash scripts/gpu_generate.sh "$ts" "$root/tests/fixtures/models/gpt2-tiny" 2>&1 | tee "$out/generate.log"
      [ "${PIPESTATUS[0]}" = 0 ] || { status=1; failed+=("generate"); } ;;
    train) bash scripts/gpu_train.sh "$ts" "$out" 2>&1 | tee "$out/train.log"
      [ "${PIPESTATUS[0]}" = 0 ] || { status=1; failed+=("train"); } ;;
  esac
done
# One summary in a fixed format, so that runs can be compared line by line.
echo "=== summary"
grep -h "test cases:" "$out"/test-*.log 2>/dev/null | awk -F'|' '
  {for (i = 2; i <= NF; i++) {split($i, w, " "); n[w[2]] += w[1]}}
  END {if (NR) printf "tests      %d passed, %d failed, %d skipped\n", n["passed"], n["failed"], n["skipped"]}'
grep -h "checks passed over" "$out/kernels_check.log" 2>/dev/null | sed 's/^/kernels    /'
grep -hE "^  batch|ratio" "$out/bench.log" 2>/dev/null | grep -E "batch|\[8192, 8192, 8192\]" | sed 's/^ */bench      /'
grep -h "^  sparse  *4096" "$out/bench.log" 2>/dev/null | sed 's/^  sparse */sparse     T=/'
grep -h "^generate" "$out/generate.log" 2>/dev/null | sed 's/^generate */generate   /'
grep -h "val loss" "$out/train.log" 2>/dev/null | sed 's/^/train      /'
if [ "$status" = 0 ]; then echo "result     passed"; else echo "result     FAILED: ${failed[*]}"; fi
exit $status
