// `tessera bench sparse-attention`: block-sparse attention (DeepSpeed's "fixed" layout: local
// windows of 4 blocks of 16 and their last block global, bidirectional) against Tessera's dense
// fused attention on the same q, k, v, forward and backward, in one run, at growing lengths,
// on --device (cpu, or cuda: Tessera's GPU kernels on both sides) in --dtype.
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
  const Device device = Device::parse(a.get("device", "cpu"));
  require_usable_device(device, "--device");
  const DType dtype = dtype_from_name(a.get("dtype", "float32"));
  TS_CHECK(is_floating(dtype), "--dtype must be a floating type, got ", dtype_name(dtype));
  nn::SparsityConfig fixed;  // DeepSpeed's defaults: block 16, 4 local blocks, 1 global
  nlohmann::json rows = nlohmann::json::array();
  if (!a.has("json"))
    std::cout << "     T  blocks computed   dense ms   sparse ms   speedup (forward + backward, "
              << B << " x " << H << " heads, D " << D << ", " << dtype_name(dtype) << " on "
              << device.str() << ")\n";
  for (int64_t T : {512, 1024, 2048, 4096}) {
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
    rows.push_back({{"t", T},
                    {"blocks_computed", share},
                    {"dense_ms", dense_ms},
                    {"sparse_ms", sparse_ms},
                    {"speedup", dense_ms / sparse_ms}});
    if (!a.has("json"))
      std::cout << std::setw(6) << T << std::fixed << std::setprecision(1) << std::setw(15)
                << 100.0 * share << "%" << std::setw(11) << dense_ms << std::setw(12) << sparse_ms
                << std::setprecision(2) << std::setw(9) << dense_ms / sparse_ms << "x\n";
  }
  if (a.has("json")) std::cout << nlohmann::json{{"results", rows}}.dump() << "\n";
  return 0;
}

}  // namespace tessera::cli
