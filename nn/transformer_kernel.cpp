#include "tessera/nn/transformer_kernel.h"

#include <vector>

#include "tessera/autograd/causal_mask.h"
#include "tessera/autograd/function.h"
#include "tessera/error.h"
#include "tessera/ops.h"

namespace tessera::nn {

namespace {

// dropout(probs) @ v keeping probs (which softmax keeps anyway) instead of the dropped-out
// probabilities: backward draws the same mask again (DeepSpeed's attn_dropout_checkpoint), in
// the sequence shard the forward drew it in. The same kernels in the same order as the plain
// ops, so the same bits.
Tensor dropout_matmul_recomputed(const Tensor& probs, const Tensor& v, double p, Generator& gen) {
  const GeneratorState before = gen.state();
  const SequenceShard shard = sequence_shard();
  GeneratorState after = before;
  const auto dropped = [p, before, shard](const Tensor& x, GeneratorState* end) {
    Generator replay;
    replay.set_state(before);
    SequenceShardGuard same_chunk(shard.rank, shard.world);
    Tensor out = dropout(x, p, true, &replay);
    if (end) *end = replay.state();
    return out;
  };
  const Tensor out = autograd::CustomFunction::apply(
      {probs, v},
      [&](autograd::FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save_for_backward({in[0], in[1]});
        return std::vector<Tensor>{matmul(dropped(in[0], &after), in[1])};
      },
      [dropped](autograd::FunctionContext& ctx, const std::vector<Tensor>& grads) {
        const std::vector<Tensor> kept = ctx.saved();
        const Tensor d_dropped = matmul(grads[0], kept[1].transpose(-2, -1));
        const Tensor dv = matmul(dropped(kept[0], nullptr).transpose(-2, -1), grads[0]);
        return std::vector<Tensor>{dropped(d_dropped, nullptr), dv};
      },
      "AttentionDropoutCheckpoint")[0];
  gen.set_state(after);  // as far as the plain dropout would have drawn
  return out;
}

// DeepSpeed's padding value: an additive mask of 0 (attend) or -10000 (hidden).
constexpr double kHidden = -10000.0;

Tensor additive_mask(const Tensor& mask, DType dtype) {
  if (!mask.defined()) return {};
  if (mask.dtype() != DType::Bool) return cast(mask, dtype);
  return (cast(mask, dtype) - 1.0) * -kHidden;
}

}  // namespace

Tensor probability_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                             double scale, bool causal, double p, bool training,
                             bool recompute_dropout, Generator* gen) {
  TS_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
           "probability_attention: q, k, v must be [batch, heads, time, head_dim], got ",
           q.describe(), ", ", k.describe(), ", ", v.describe());
  // (Contiguous copies: what matmul keeps for backward is then the same for every layout of
  // the heads, and no view keeps all of a joined q|k|v alive.)
  const Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  Tensor scores = matmul(qc, kc.transpose(-2, -1)) * scale;
  if (mask.defined()) scores = scores + additive_mask(mask, scores.dtype());
  if (causal)
    scores = scores + additive_mask(autograd::causal_visibility(q.size(2), k.size(2), q.device()),
                                    scores.dtype());
  const Tensor probs = softmax(scores, -1);
  Generator& g = gen ? *gen : default_generator();
  if (recompute_dropout && training && p > 0) return dropout_matmul_recomputed(probs, vc, p, g);
  return matmul(dropout(probs, p, training, &g), vc);
}

}  // namespace tessera::nn
