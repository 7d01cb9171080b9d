// `tessera bench gemm`: Tessera's matmul against OpenBLAS's sgemm called directly, timed in
// the same process on the same shapes, so the ratio is immune to machine drift.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tools/cli.h"

namespace tessera::cli {

namespace {

// Times `a` and `b` alternately (a, b, a, b, ...) so that clock and thermal drift hit both
// alike; returns their median milliseconds.
std::pair<double, double> interleaved_median_ms(const std::function<void()>& a,
                                                const std::function<void()>& b, int iters) {
  for (int i = 0; i < 3; ++i) a(), b();
  std::vector<double> ta, tb;
  auto time = [](const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < iters; ++i) {
    ta.push_back(time(a));
    tb.push_back(time(b));
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

int bench_gemm(const Args& a) {
  // Square sizes plus GPT-2 layer shapes (rows = batch*tokens, 768 -> 3072 and back).
  std::vector<std::array<int64_t, 3>> shapes;  // M, N, K
  if (a.has("shape")) {
    const Shape s = parse_shape(a.get("shape", ""));
    TS_CHECK(s.size() == 3, "--shape: expected M,N,K");
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
  nlohmann::json rows = nlohmann::json::array();
  double min_ratio = 1e9;
  if (!a.has("json"))
    std::cout << "     M      N      K   tessera GFLOP/s   OpenBLAS GFLOP/s   ratio\n";
  for (const auto& [M, N, K] : shapes) {
    Generator gen(0);
    const Tensor A = randn({M, K}, DType::Float32, Device::cpu(), &gen);
    const Tensor B = randn({K, N}, DType::Float32, Device::cpu(), &gen);
    Tensor C = Tensor::empty({M, N});
    const auto [t_ts, t_blas] = interleaved_median_ms(
        [&] { matmul(A, B); },
        [&] {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A.data<float>(), K,
                      B.data<float>(), N, 0.0f, C.data<float>(), N);
        },
        iters);
    const double flop = 2.0 * M * N * K;
    const double g_ts = flop / t_ts / 1e6, g_blas = flop / t_blas / 1e6, ratio = g_ts / g_blas;
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
  const Args a(argc, argv, 2, {"json", "help"}, {"shape", "iters"});
  if (a.has("help") || a.positional().empty()) {
    std::cout << "usage: tessera bench gemm [--shape M,N,K] [--iters N] [--json]\n\n"
                 "Times Tessera's float32 matmul and OpenBLAS's cblas_sgemm on the same shapes in "
                 "one run and prints both rates and their ratio.\n";
    return a.has("help") ? 0 : 2;
  }
  const std::string what = a.positional()[0];
  if (what == "gemm") return bench_gemm(a);
  fail("unknown benchmark '", what, "': expected gemm");
}

}  // namespace tessera::cli
