// Scaled-dot-product attention and block-sparse attention through their fused kernels.
#include <cmath>
#include <vector>

#include "op_util.h"
#include "tessera/autograd/causal_mask.h"

namespace tessera {

using autograd::record;
using detail::untracked;

namespace {

// Attention with dropout as ops (devices whose kernel does not take dropout yet): the mask
// dropout() draws over the [B, H, Tq, Tk] probabilities, as the fused kernel draws it.
Tensor attention_with_dropout_ops(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& mask, bool causal, double scale, double p,
                                  Generator* gen) {
  const int64_t Tq = q.shape()[2], Tk = k.shape()[2];
  // Hidden scores at fp16's lowest finite value (any dtype holds it), and the probabilities
  // multiplied by the visibility after softmax: a row with no visible key gives 0, as the
  // kernel does, instead of NaN.
  const auto hide = [&](const Tensor& visible, const Tensor& scores) {
    return where(visible, scores, full({}, -65504.0, scores.dtype(), scores.device()));
  };
  Tensor scores = matmul(q, k.transpose(-2, -1)) * scale;
  std::vector<Tensor> visible;
  if (mask.defined()) visible.push_back(mask);
  if (causal) visible.push_back(autograd::causal_visibility(Tq, Tk, q.device()));
  for (const Tensor& m : visible) scores = hide(m, scores);
  Tensor probs = softmax(scores, -1);
  for (const Tensor& m : visible) probs = probs * cast(m, probs.dtype());
  return matmul(dropout(probs, p, true, gen), v);
}

// The dropout attributes of the fused kernel: p, the counters reserved as dropout() reserves
// them for a [B, H, Tq, Tk] tensor, and the sequence (or head) shard that rows are chunks of.
void reserve_attention_dropout(KernelAttrs& a, double p, int64_t elements, Generator* gen) {
  SequenceShard seq;
  const GeneratorState s =
      detail::reserve_dropout_counters(static_cast<uint64_t>(elements), gen, seq);
  a.scalar2 = p;
  a.seed = s.seed;
  a.offset = s.offset;
  a.dims = {seq.rank, seq.world};
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool causal,
                                    std::optional<double> scale, double dropout_p, Generator* gen) {
  const char* op = "scaled_dot_product_attention";
  TS_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, op, ": dropout_p must be in [0, 1], got ",
           dropout_p);
  TS_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
           ": expected 4-D q, k, v [B, H, T, D], got ", q.describe(), ", ", k.describe(), ", ",
           v.describe());
  const int64_t B = q.shape()[0], H = q.shape()[1], Tq = q.shape()[2], D = q.shape()[3];
  const int64_t Tk = k.shape()[2], Dv = v.shape()[3];
  TS_CHECK(k.shape() == Shape({B, H, Tk, D}) && v.shape()[0] == B && v.shape()[1] == H &&
               v.shape()[2] == Tk && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
           op, ": mismatched q, k, v: ", q.describe(), ", ", k.describe(), ", ", v.describe());
  detail::check_floating(op, q);
  detail::check_same_device(op, {q, k, v, attn_mask});
  Tensor mask;
  if (attn_mask.defined()) {
    TS_CHECK(attn_mask.dtype() == DType::Bool, op, ": attn_mask must be bool (true = attend), got ",
             attn_mask.describe());
    mask = untracked(attn_mask).expand({B, H, Tq, Tk});
  }
  KernelAttrs a;
  a.flag = causal;
  a.scalar = scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  if (dropout_p > 0 && !q.device().is_cpu())
    return attention_with_dropout_ops(q, k, v, attn_mask, causal, a.scalar, dropout_p, gen);
  if (dropout_p > 0) reserve_attention_dropout(a, dropout_p, B * H * Tq * Tk, gen);
  const Tensor qc = untracked(q).contiguous(), kc = untracked(k).contiguous(),
               vc = untracked(v).contiguous();
  Tensor o = Tensor::empty({B, H, Tq, Dv}, q.dtype(), q.device());
  Tensor lse = Tensor::empty({B, H, Tq}, detail::compute_dtype(q.dtype()), q.device());
  {
    const TensorBase ins[4] = {qc, kc, vc, mask};
    TensorBase outs[2] = {o, lse};
    run_kernel(Kernel::attention, q.device(), q.dtype(), ins, outs, a);
  }
  std::vector<Tensor> outs{o};
  record("AttentionBackward", {q, k, v}, outs,
         [qc, kc, vc, o = untracked(o), lse, mask, a](const std::vector<Tensor>& g) {
           Tensor dq = Tensor::empty(qc.shape(), qc.dtype(), qc.device());
           Tensor dk = Tensor::empty(kc.shape(), kc.dtype(), kc.device());
           Tensor dv = Tensor::empty(vc.shape(), vc.dtype(), vc.device());
           const TensorBase ins[7] = {g[0].contiguous(), qc, kc, vc, o, lse, mask};
           TensorBase outs[3] = {dq, dk, dv};
           run_kernel(Kernel::attention_backward, qc.device(), qc.dtype(), ins, outs, a);
           return std::vector<Tensor>{dq, dk, dv};
         },
         {qc, kc, vc});  // the copies, not q, k, v: a view must not keep its whole base alive
  return outs[0];
}

namespace {

// Runs a block-sparse kernel on its outputs (created here) and returns them.
std::vector<Tensor> run_sparse_kernel(Kernel kernel, Device device, DType dtype,
                                      const std::vector<Tensor>& ins, std::vector<Tensor> outs,
                                      const KernelAttrs& a) {
  const std::vector<TensorBase> in_bases(ins.begin(), ins.end());
  std::vector<TensorBase> out_bases(outs.begin(), outs.end());
  run_kernel(kernel, device, dtype, in_bases, out_bases, a);
  return outs;
}

}  // namespace

Tensor block_sparse_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& layout, const Tensor& key_padding_mask, bool causal,
                              std::optional<double> scale) {
  const char* op = "block_sparse_attention";
  TS_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
           ": expected 4-D q, k, v [B, H, T, D], got ", q.describe(), ", ", k.describe(), ", ",
           v.describe());
  const int64_t B = q.shape()[0], H = q.shape()[1], T = q.shape()[2], D = q.shape()[3];
  const int64_t Dv = v.shape()[3];
  TS_CHECK(k.shape() == q.shape() && v.shape() == Shape({B, H, T, Dv}) && q.dtype() == k.dtype() &&
               q.dtype() == v.dtype(),
           op, ": q, k, v must be [B, H, T, D] of one dtype (self-attention), got ", q.describe(),
           ", ", k.describe(), ", ", v.describe());
  detail::check_floating(op, q);
  detail::check_same_device(op, {q, k, v, key_padding_mask});
  TS_CHECK(layout.defined() && layout.dtype() == DType::Int64 && layout.dim() == 3 &&
               layout.shape()[0] == H && layout.shape()[1] == layout.shape()[2] &&
               layout.shape()[1] >= 1 && T % layout.shape()[1] == 0,
           op, ": layout must be int64 [H, T / block, T / block] = [", H,
           ", n, n] with n dividing T ", T, ", got ",
           layout.defined() ? layout.describe() : std::string("none"));
  Tensor mask;
  if (key_padding_mask.defined()) {
    TS_CHECK(key_padding_mask.dtype() == DType::Bool && key_padding_mask.shape() == Shape({B, T}),
             op, ": key_padding_mask must be bool [B, T] = [", B, ", ", T,
             "] (true = attend), got ", key_padding_mask.describe());
    mask = untracked(key_padding_mask).contiguous();
  }
  KernelAttrs a;
  a.flag = causal;
  a.scalar = scale.value_or(1.0 / std::sqrt(static_cast<double>(D)));
  const Tensor qc = untracked(q).contiguous(), kc = untracked(k).contiguous(),
               vc = untracked(v).contiguous();
  // The layout is read on the host (the GPU kernel turns it into lists of blocks).
  const Tensor lay = untracked(layout).to(Device::cpu()).contiguous();
  const Device dev = q.device();
  const std::vector<Tensor> fwd =
      run_sparse_kernel(Kernel::block_sparse_attention, dev, q.dtype(), {qc, kc, vc, lay, mask},
                        {Tensor::empty({B, H, T, Dv}, q.dtype(), dev),
                         Tensor::empty({B, H, T}, detail::compute_dtype(q.dtype()), dev)},
                        a);
  std::vector<Tensor> outs{fwd[0]};
  record("BlockSparseAttentionBackward", {q, k, v}, outs,
         [qc, kc, vc, o = untracked(fwd[0]), lse = fwd[1], lay, mask,
          a](const std::vector<Tensor>& g) {
           const Device d = qc.device();
           return run_sparse_kernel(
               Kernel::block_sparse_attention_backward, d, qc.dtype(),
               {g[0].contiguous(), qc, kc, vc, o, lse, lay, mask},
               {Tensor::empty(qc.shape(), qc.dtype(), d), Tensor::empty(kc.shape(), kc.dtype(), d),
                Tensor::empty(vc.shape(), vc.dtype(), d)},
               a);
         },
         {qc, kc, vc});
  return outs[0];
}

}  // namespace tessera
