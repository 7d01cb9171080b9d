// `tessera bench gemm`: Tessera's matmul against OpenBLAS's sgemm on its own thread pool, timed
// in the same process on the same shapes.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::cli {

namespace {

int bench_gemm(const Args& a) {
  // Square sizes plus GPT-2 layer shapes (rows = batch*tokens, 768 -> 3072 and back).
  std::vector<std::array<int64_t, 3>> shapes;  // M, N, K
  if (a.has("shape")) {
    const Shape s = parse_shape(a.get("shape", ""));
    TS_CHECK(s.size() == 3, "--shape: expected M,N,K");
    // Each operand is allocated: every size at least 1, and each matrix at most 2^30 floats.
    for (int64_t d : s) TS_CHECK(d >= 1, "--shape ", a.get("shape", ""), ": sizes must be >= 1");
    for (auto [r, c] : {std::pair{s[0], s[2]}, std::pair{s[2], s[1]}, std::pair{s[0], s[1]}})
      TS_CHECK(r <= (int64_t{1} << 30) / c, "--shape ", a.get("shape", ""), ": a ", r, " x ", c,
               " matrix is over 2^30 floats (4 GiB)");
    shapes.push_back({s[0], s[1], s[2]});
  } else {
    shapes = {{512, 512, 512},
              {1024, 1024, 1024},
              {2048, 2048, 2048},
              {256, 3072, 768},
              {256, 768, 3072}};
  }
  const int iters = static_cast<int>(a.get_int("iters", 15));
  NoGradGuard no_grad;
  // Tessera first, then OpenBLAS on its own thread pool: that pool's threads keep spinning for
  // a while after each call and slow anything run beside them, so the two are timed in
  // separate phases of one run rather than interleaved.
  struct Operands {
    Tensor A, B, C;
  };
  std::vector<Operands> ops;
  std::vector<double> t_ts, t_blas;
  for (const auto& [M, N, K] : shapes) {
    Generator gen(0);
    ops.push_back({randn({M, K}, DType::Float32, Device::cpu(), &gen),
                   randn({K, N}, DType::Float32, Device::cpu(), &gen), Tensor::empty({M, N})});
    const Operands& o = ops.back();
    t_ts.push_back(median_ms([&] { matmul(o.A, o.B); }, iters));
  }
  openblas_set_num_threads(omp_get_max_threads());
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t M = std::get<0>(shapes[i]), N = std::get<1>(shapes[i]),
                  K = std::get<2>(shapes[i]);  // (captured below: not a structured binding)
    Operands& o = ops[i];
    t_blas.push_back(median_ms(
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, o.A.data<float>(),
                      K, o.B.data<float>(), N, 0.0f, o.C.data<float>(), N);
        },
        iters));
  }
  openblas_set_num_threads(1);
  nlohmann::json rows = nlohmann::json::array();
  double min_ratio = 1e9;
  if (!a.has("json"))
    std::cout << "     M      N      K   tessera GFLOP/s   OpenBLAS GFLOP/s   ratio\n";
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [M, N, K] = shapes[i];
    const double flop = 2.0 * M * N * K;
    const double g_ts = flop / t_ts[i] / 1e6, g_blas = flop / t_blas[i] / 1e6,
                 ratio = g_ts / g_blas;
    min_ratio = std::min(min_ratio, ratio);
    rows.push_back({{"m", M},
                    {"n", N},
                    {"k", K},
                    {"tessera_gflops", g_ts},
                    {"openblas_gflops", g_blas},
                    {"ratio", ratio}});
    if (!a.has("json"))
      std::cout << std::setw(6) << M << " " << std::setw(6) << N << " " << std::setw(6) << K
                << std::fixed << std::setprecision(1) << std::setw(18) << g_ts << std::setw(19)
                << g_blas << std::setprecision(3) << std::setw(8) << ratio << "\n";
  }
  if (a.has("json"))
    std::cout << nlohmann::json{{"results", rows}, {"min_ratio", min_ratio}}.dump() << "\n";
  else
    std::cout << "lowest ratio: " << std::setprecision(3) << min_ratio << " (target >= 0.90)\n";
  return 0;
}

}  // namespace

int bench_main(int argc, char** argv) {
  const Args a(
      argc, argv, 2, {"json", "help"},
      {"shape", "iters", "preset", "device", "dtype", "batch", "peak-tflops", "vocab", "merges",
       "corpus", "python", "threads", "heads", "max-t", "seq", "params", "sizes"});
  if (a.has("help") || a.positional().empty()) {
    std::cout
        << "usage: tessera bench gemm [--shape M,N,K] [--iters N] [--json]\n"
           "       tessera bench train --preset tiny|small|gpt2|gpt2-1024 [--device D] [--dtype "
           "T]\n"
           "                           [--batch B] [--iters N] [--peak-tflops F] [--json]\n\n"
           "gemm: Tessera's float32 matmul and OpenBLAS's cblas_sgemm (on its own thread pool) on "
           "the\n"
           "same shapes in one run, with their ratio.\n"
           "train: one GPT-2-style training step at ../shared/reference/gpt_bench.py's shapes\n"
           "(median of 10 after 3 warm-up steps); scripts/bench_train.sh runs PyTorch beside it.\n"
           "--device cuda --dtype bfloat16 trains in bf16 with float32 masters and reports model\n"
           "TFLOP/s and MFU (6N + 12LTd FLOPs per token); scripts/gpu_bench.sh runs PyTorch beside "
           "it.\n"
           "       tessera bench tokenizer --vocab vocab.json --merges merges.txt --corpus FILE\n"
           "                               [--threads N] [--python PY] [--json]\n"
           "tokenizer: GPT-2 BPE MB/s of Tessera's corpus encoding (as training tokenises) and, "
           "in the\n"
           "same run, of Hugging Face's tokenizers (encode_batch of 64 KB pieces; when PY, "
           "default\n"
           "build/test-python's or python3, has it), N threads each (default: the cores), with "
           "the\n"
           "ratio and whether the ids agree.\n"
           "       tessera bench sparse-attention [--batch B] [--heads H] [--iters N] [--device "
           "D]\n"
           "                                      [--dtype T] [--json]\n"
           "sparse-attention: block-sparse attention (DeepSpeed's fixed layout, block 16) against "
           "the\n"
           "dense fused attention, forward + backward, at T = 512 to --max-t (4096) in one run, "
           "with\n"
           "each one's peak memory.\n"
           "       tessera bench transformer-kernel [--batch B] [--seq T] [--iters N] [--device "
           "D]\n"
           "                                        [--dtype T] [--json]\n"
           "transformer-kernel: DeepSpeed's transformer kernel layer (BERT-base's, default B 8, T "
           "128)\n"
           "against the same layer from separate ops, forward + backward, time and peak memory.\n"
           "       tessera bench optimizer [--params N,N,...] [--iters N] [--python PY] [--json]\n"
           "optimizer: Tessera's fused Adam step (float32 masters, bf16 copies and gradients) at\n"
           "each size (default 10M,100M; K, M, B suffixes) against torch.optim.Adam (for-loop,\n"
           "its CPU default, and foreach; PY default /usr/bin/python3), with the bandwidth bound\n"
           "from a STREAM-like pass (b += a) measured in the same run.\n"
           "       mpirun -np N tessera bench all-to-all [--sizes 16K,256K,983040,4M] [--iters N] "
           "[--json]\n"
           "all-to-all: MoE's dispatch exchange at each size (bytes per rank; 983040: the\n"
           "shakespeare_char_moe config's buffer) against (N - 1) / N of its bytes over the\n"
           "bandwidth of a 64 MB exchange measured in the same run.\n";
    return a.has("help") ? 0 : 2;
  }
  const std::string what = a.positional()[0];
  if (what == "gemm") return bench_gemm(a);
  if (what == "train") return bench_train(a);
  if (what == "tokenizer") return bench_tokenizer(a);
  if (what == "sparse-attention") return bench_sparse_attention(a);
  if (what == "transformer-kernel") return bench_transformer_kernel(a);
  if (what == "optimizer") return bench_optimizer(a);
  if (what == "all-to-all") return bench_all_to_all(a);
  fail("unknown benchmark '", what,
       "': expected gemm, train, tokenizer, sparse-attention, transformer-kernel, optimizer or "
       "all-to-all");
}

}  // namespace tessera::cli
