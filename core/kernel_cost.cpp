// The flops profiler's count per kernel call (the rules are in kernel_cost.h).
#include "tessera/kernel_cost.h"

#include <algorithm>

namespace tessera {

int64_t attention_pairs(int64_t Tq, int64_t Tk, bool causal) {
  if (!causal) return Tq * Tk;
  // Query i sees keys 0..i + Tk - Tq: min(Tk, max(0, i + Tk - Tq + 1)) of them.
  int64_t pairs = 0;
  for (int64_t i = 0; i < Tq; ++i) pairs += std::clamp<int64_t>(i + Tk - Tq + 1, 0, Tk);
  return pairs;
}

namespace {
int64_t out_numel(const KernelCall& c) {
  return c.outputs.empty() ? 0 : c.outputs[0].numel();
}
}  // namespace

KernelCost kernel_cost(Kernel k, const KernelCall& c) {
  switch (k) {
    case Kernel::matmul: {
      // inputs a [..., M, K], b [..., K, N]; output [..., M, N].
      const int64_t K = c.inputs[0].shape().back();
      const int64_t macs = out_numel(c) * K;
      return {2 * macs, macs};
    }
    case Kernel::attention: {
      // inputs q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv]; attrs.flag = causal.
      const Shape& q = c.inputs[0].shape();
      const int64_t Tk = c.inputs[1].shape()[2], Dv = c.inputs[2].shape()[3];
      const int64_t pairs = q[0] * q[1] * attention_pairs(q[2], Tk, c.attrs.flag);
      const int64_t macs = pairs * (q[3] + Dv);
      return {2 * macs, macs};
    }
    case Kernel::layer_norm:
      // inputs x [N, C], weight, bias (either undefined when absent).
      return {c.inputs[0].numel() * (c.inputs[1].defined() ? 5 : 4), 0};
    case Kernel::softmax:
    case Kernel::log_softmax:
    case Kernel::cross_entropy:
      return {c.inputs[0].numel(), 0};
    case Kernel::add:
    case Kernel::sub:
    case Kernel::mul:
    case Kernel::div:
    case Kernel::pow:
    case Kernel::neg:
    case Kernel::exp:
    case Kernel::log:
    case Kernel::sqrt:
    case Kernel::rsqrt:
    case Kernel::abs:
    case Kernel::tanh:
    case Kernel::sigmoid:
    case Kernel::relu:
    case Kernel::gelu:
    case Kernel::gelu_tanh:
      return {out_numel(c), 0};
    default:
      return {};
  }
}

}  // namespace tessera
