// Scaled-dot-product attention through the fused attention kernels.
#include <cmath>

#include "op_util.h"

namespace tessera {

using autograd::record;
using detail::untracked;

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool causal,
                                    std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
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

}  // namespace tessera
