// `tessera bench transformer-kernel`: DeepSpeed's transformer kernel layer
// (nn::DeepSpeedTransformerLayer: q|k|v in one GEMM, attention with its mask and dropout in the
// fused kernel, keeping no probabilities) against the same layer built from separate ops (what
// one writes without the kernel: q, k and v GEMMs, scores, mask, softmax, dropout and the
// product as ops), on the same parameters, forward and backward, in one run: median time and
// peak memory of each, and their ratios. BERT-base's layer by default (B 8, T 128, C 768,
// I 3072, 12 heads), Post-LN, dropout 0.1 on the probabilities and the hidden states.
#include <cmath>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/cuda.h"
#include "tessera/nn/deepspeed_transformer_layer.h"
#include "tessera/nn/layers.h"
#include "tessera/ops.h"

namespace tessera::cli {

namespace {

// The layer's Post-LN forward from separate ops over its own parameters.
Tensor separate_ops_layer(const nn::DeepSpeedTransformerLayer& l, const Tensor& x,
                          const Tensor& keep) {
  const auto& c = l.config();
  const int64_t C = c.hidden_size, H = c.heads;
  const auto rows = [&](const Tensor& t, int64_t i) { return t.narrow(0, i * C, C); };
  const Tensor q = nn::split_heads(linear(x, rows(l.attn_qkvw, 0), rows(l.attn_qkvb, 0)), H),
               k = nn::split_heads(linear(x, rows(l.attn_qkvw, 1), rows(l.attn_qkvb, 1)), H),
               v = nn::split_heads(linear(x, rows(l.attn_qkvw, 2), rows(l.attn_qkvb, 2)), H);
  Tensor scores = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(C / H)));
  scores = scores + (cast(keep, scores.dtype()) - 1.0) * 10000.0;
  const Tensor probs = dropout(softmax(scores, -1), c.attn_dropout_ratio);
  const Tensor attn = linear(nn::merge_heads(matmul(probs, v)), l.attn_ow, l.attn_ob);
  const Shape width{C};
  const Tensor h = layer_norm(x + dropout(attn, c.hidden_dropout_ratio), width, l.attn_nw,
                              l.attn_nb, c.layer_norm_eps);
  const Tensor ffn =
      linear(gelu(linear(h, l.inter_w, l.inter_b), GeluApprox::Tanh), l.output_w, l.output_b);
  return layer_norm(h + dropout(ffn, c.hidden_dropout_ratio), width, l.norm_w, l.norm_b,
                    c.layer_norm_eps);
}

}  // namespace

int bench_transformer_kernel(const Args& a) {
  const int64_t B = a.get_int("batch", 8), T = a.get_int("seq", 128);
  const int iters = static_cast<int>(a.get_int("iters", 5));
  TS_CHECK(B >= 1 && B <= 256 && T >= 1 && T <= 4096,
           "--batch must be in [1, 256] and --seq in [1, 4096]");
  TS_CHECK(iters >= 1 && iters <= 1000, "--iters must be in [1, 1000]");
  const Device device = Device::parse(a.get("device", "cpu"));
  require_usable_device(device, "--device");
  const DType dtype = dtype_from_name(a.get("dtype", "float32"));
  TS_CHECK(dtype == DType::Float32 || dtype == DType::BFloat16 || dtype == DType::Float16,
           "--dtype must be float32, bfloat16 or float16, got ", dtype_name(dtype));
  nn::DeepSpeedTransformerConfig c;
  c.hidden_size = 768, c.intermediate_size = 3072, c.heads = 12, c.num_hidden_layers = 12;
  c.attn_dropout_ratio = 0.1, c.hidden_dropout_ratio = 0.1, c.initializer_range = 0.02;
  c.fp16 = dtype == DType::Float16, c.bf16 = dtype == DType::BFloat16;
  manual_seed(0);
  nn::Module root;
  nn::DeepSpeedTransformerLayer layer(&root, "layer", c);
  root.to(device);
  const Tensor x = randn({B, T, c.hidden_size}).to(dtype).to(device).requires_grad_();
  const Tensor keep = ones({B, 1, 1, T}, DType::Bool, device);  // (a mask, as BERT passes one)
  auto step = [&](bool kernel) {
    const Tensor out = kernel ? layer.forward(x, keep) : separate_ops_layer(layer, x, keep);
    sum(out).backward();
    synchronize_device(device);
  };
  const double separate_ms = median_ms([&] { step(false); }, iters, 1);
  const double kernel_ms = median_ms([&] { step(true); }, iters, 1);
  const double separate_mb = peak_mb(device, [&] { step(false); }),
               kernel_mb = peak_mb(device, [&] { step(true); });
  const nlohmann::json result{{"batch", B},
                              {"seq", T},
                              {"separate_ops_ms", separate_ms},
                              {"kernel_ms", kernel_ms},
                              {"speedup", separate_ms / kernel_ms},
                              {"separate_ops_peak_mb", separate_mb},
                              {"kernel_peak_mb", kernel_mb}};
  if (a.has("json")) {
    std::cout << result.dump() << "\n";
    return 0;
  }
  std::cout << "BERT-base layer, B " << B << ", T " << T << ", " << dtype_name(dtype) << " on "
            << device.str() << ", forward + backward, dropout 0.1 (median of " << iters << "):\n"
            << std::fixed << std::setprecision(1) << "  separate ops      " << std::setw(8)
            << separate_ms << " ms  " << std::setw(8) << separate_mb << " MB peak\n"
            << "  transformer kernel" << std::setw(8) << kernel_ms << " ms  " << std::setw(8)
            << kernel_mb << " MB peak\n"
            << std::setprecision(2) << "  speedup " << separate_ms / kernel_ms << "x, memory "
            << kernel_mb / separate_mb << "x\n";
  return 0;
}

}  // namespace tessera::cli
