// The pieces of DeepSpeed's transformer kernel that DeepSpeedTransformerLayer and the built-in
// models share (`"model": {"transformer_kernel": true}`): the options that trade recomputation
// for activation memory, and attention through explicit probabilities (needed for their
// dropout, which the fused flash attention does not apply).
#pragma once

#include "tessera/rng.h"
#include "tessera/tensor.h"

namespace tessera::nn {

// The transformer kernel's options a model takes (Tessera's "transformer_kernel" section; the
// same fields of DeepSpeedTransformerConfig). None changes a result beyond rounding; each keeps
// less for backward:
//   normalize_invertible     LayerNorms keep their output, not their input (backward rebuilds
//                            it): 2 x rows x hidden per post- or pre-LN layer
//   gelu_checkpoint          the GELU's output is recomputed in backward: rows x inner
//   attn_dropout_checkpoint  the dropped-out probabilities are drawn again in backward:
//                            batch x heads x T x T (probability_attention; the fused attention
//                            keeps no probabilities anyway)
// attn_dropout_ratio: dropout on the attention probabilities (DeepSpeed's; the built-in models
// apply it inside the fused attention, scaled_dot_product_attention's dropout_p). stochastic_mode:
// DeepSpeed's faster non-deterministic CUDA kernels; Tessera's kernels are deterministic, so it
// changes nothing (accepted for DeepSpeed's configs).
struct TransformerKernelOptions {
  bool normalize_invertible = false;
  bool gelu_checkpoint = false;
  bool attn_dropout_checkpoint = false;
  double attn_dropout_ratio = 0.0;
  bool stochastic_mode = false;
};

// softmax(q k^T scale + mask) with dropout p (when training), times v; q [B, H, Tq, D], k and
// v [B, H, Tk, D]. mask: additive (0 to attend, -10000 for padding: HF's extended mask) or bool
// (true = attend, turned into that additive form), broadcastable to [B, H, Tq, Tk]; causal:
// keys after their query hidden as well. recompute_dropout (attn_dropout_checkpoint) keeps the
// probabilities alone and draws the same dropout mask again in backward: the same bits.
// Dropout draws from `gen` (the default generator when null); inside a SequenceShardGuard it
// draws that chunk of dim 1 (a tensor-parallel rank's heads) of one process's masks.
Tensor probability_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             double scale, bool causal, double p, bool training,
                             bool recompute_dropout, Generator* gen = nullptr);

}  // namespace tessera::nn
