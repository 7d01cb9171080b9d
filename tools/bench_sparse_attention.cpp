// `tessera bench sparse-attention`: block-sparse attention (DeepSpeed's "fixed" layout: local
// windows of 4 blocks of 16 and their last block global, bidirectional) against Tessera's dense
// fused attention on the same q, k, v, forward and backward, in one run, at growing lengths,
// on --device (cpu, or cuda: Tessera's GPU kernels on both sides) in --dtype, with each one's
// peak memory above what it started with (the device allocator's), beside the size of the
// T x T probabilities an attention that keeps them for backward holds.
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/cuda.h"
#include "tessera/dispatch.h"
#include "tessera/nn/sparsity_config.h"
#include "tessera/ops.h"

namespace tessera::cli {

int bench_sparse_attention(const Args& a) {
  const int64_t B = a.get_int("batch", 1), H = a.get_int("heads", 4), D = 64;
  const int iters = static_cast<int>(a.get_int("iters", 5));
  TS_CHECK(B >= 1 && B <= 64 && H >= 1 && H <= 64, "--batch and --heads must be in [1, 64]");
  TS_CHECK(iters >= 1 && iters <= 1000, "--iters must be in [1, 1000]");
  const int64_t max_t = a.get_int("max-t", 4096);
  TS_CHECK(max_t >= 512 && max_t <= 4096, "--max-t must be in [512, 4096], got ", max_t);
  const Device device = Device::parse(a.get("device", "cpu"));
  require_usable_device(device, "--device");
  const DType dtype = dtype_from_name(a.get("dtype", "float32"));
  TS_CHECK(is_floating(dtype), "--dtype must be a floating type, got ", dtype_name(dtype));
  nn::SparsityConfig fixed;  // DeepSpeed's defaults: block 16, 4 local blocks, 1 global
  nlohmann::json rows = nlohmann::json::array();
  if (!a.has("json"))
    std::cout << "     T  blocks computed   dense ms   sparse ms   speedup   dense MB  sparse MB"
                 "   T x T MB (forward + backward, "
              << B << " x " << H << " heads, D " << D << ", " << dtype_name(dtype) << " on "
              << device.str() << ")\n";
  for (int64_t T = 512; T <= max_t; T *= 2) {
    Generator gen(0);
    auto input = [&] {
      return randn({B, H, T, D}, DType::Float32, Device::cpu(), &gen)
          .to(dtype)
          .to(device)
          .requires_grad_();
    };
    const Tensor q = input(), k = input(), v = input();
    nn::PythonRandom random(0);
    const Tensor layout = nn::make_sparsity_layout(fixed, H, T, random);
    const double share =
        sum(layout.to(DType::Float64)).item() / static_cast<double>(layout.numel());
    auto step = [&](bool sparse) {
      const Tensor o =
          sparse ? block_sparse_attention(q, k, v, layout) : scaled_dot_product_attention(q, k, v);
      sum(o).backward();
      synchronize_device(device);  // GPU kernels run asynchronously
    };
    const double dense_ms = median_ms([&] { step(false); }, iters, 1);
    const double sparse_ms = median_ms([&] { step(true); }, iters, 1);
    const double dense_mb = peak_mb(device, [&] { step(false); }),
                 sparse_mb = peak_mb(device, [&] { step(true); });
    const double scores_mb =
        static_cast<double>(B * H * T * T * static_cast<int64_t>(itemsize(dtype))) / 1e6;
    rows.push_back({{"t", T},
                    {"blocks_computed", share},
                    {"dense_ms", dense_ms},
                    {"sparse_ms", sparse_ms},
                    {"speedup", dense_ms / sparse_ms},
                    {"dense_peak_mb", dense_mb},
                    {"sparse_peak_mb", sparse_mb},
                    {"scores_mb", scores_mb}});
    if (!a.has("json"))
      std::cout << std::setw(6) << T << std::fixed << std::setprecision(1) << std::setw(15)
                << 100.0 * share << "%" << std::setw(11) << dense_ms << std::setw(12) << sparse_ms
                << std::setprecision(2) << std::setw(9) << dense_ms / sparse_ms << "x"
                << std::setprecision(1) << std::setw(11) << dense_mb << std::setw(11) << sparse_mb
                << std::setw(11) << scores_mb << "\n";
  }
  if (a.has("json")) std::cout << nlohmann::json{{"results", rows}}.dump() << "\n";
  return 0;
}

}  // namespace tessera::cli
