// What one forward kernel call costs in floating-point operations, for the flops profiler.
// A multiply-add is 2 FLOPs and 1 MAC. Counted:
//   matmul (linear too)      2 * numel(out) * K FLOPs, numel(out) * K MACs (a bias add is not
//                            counted, as DeepSpeed's profiler does not count F.linear's)
//   attention                2 * pairs * (D + Dv) FLOPs, pairs * (D + Dv) MACs, where pairs
//                            are the query-key pairs scored: B*H*Tq*Tk, or with a causal mask
//                            only those at or below the diagonal (j <= i + Tk - Tq), since the
//                            kernels skip the blocks above it (DeepSpeed counts the full Tq*Tk)
//   layer_norm               5 per element (4 without a weight)
//   softmax, log_softmax     1 per element
//   cross_entropy            1 per logit (its softmax; DeepSpeed leaves F.cross_entropy out)
//   elementwise arithmetic   1 per output element: add sub mul div pow neg exp log sqrt
//   and activations          rsqrt abs tanh sigmoid relu gelu gelu_tanh
// Zero: copies, casts, fills, random fills, embedding lookups, dropout, comparisons, where,
// reductions, and every backward and optimizer kernel (the profiler counts the forward pass;
// the backward is estimated as 2x it, as DeepSpeed does). matmul, attention (non-causal),
// layer_norm, softmax, gelu, relu, add and mul are DeepSpeed's profiler's own formulas.
#pragma once
#include <cstdint>

#include "tessera/dispatch.h"

namespace tessera {

struct KernelCost {
  int64_t flops = 0;
  int64_t macs = 0;
};
KernelCost kernel_cost(Kernel k, const KernelCall& call);

// Query-key pairs an attention over Tq queries and Tk keys scores (per batch and head).
int64_t attention_pairs(int64_t Tq, int64_t Tk, bool causal);

}  // namespace tessera
