// FP8 GEMMs in Transformer Engine's style (its Linear under fp8_autocast with a
// DelayedScaling recipe), emulated with the GPU's numbers: the operands are cast to FP8
// numbers (tessera/fp8.h) at per-tensor scales, their products accumulated in float32 and the
// result scaled back by the inverse scales (cuBLASLt's alpha), the bias added in float32, then
// rounded to the output's dtype. The scales come from earlier steps' amaxes (nn::Fp8Recipe
// updates them); each cast raises its tensor's amax for the next update.
#pragma once
#include <memory>
#include <vector>

#include "tessera/fp8.h"
#include "tessera/tensor.h"

namespace tessera {

// One FP8 tensor's delayed scaling state.
struct Fp8TensorScaling {
  float scale = 1.0f;          // multiplies the tensor before its cast
  Tensor amax;                 // float32 [1] on the layer's device: max |x| since the update
  std::vector<float> history;  // past amaxes, history[0] the newest (nn::Fp8Recipe's)
};

// The three FP8 tensors of one linear layer: input and weight in forward, the output's
// gradient in backward (Transformer Engine's HYBRID: E4M3 forward, E5M2 backward).
struct Fp8LinearScaling {
  Fp8Format forward_format = Fp8Format::E4M3;
  Fp8Format backward_format = Fp8Format::E5M2;
  Fp8TensorScaling input, weight, grad_output;
};

// x's FP8 numbers at `scale` in x's dtype (not divided back); raises *amax (float32 [1] on
// x's device) to max |x| when amax is given. Not differentiable.
Tensor fp8_cast(const Tensor& x, float scale, Fp8Format format, Tensor* amax = nullptr);

// y = x weight^T + bias through FP8 (x [..., in], weight [out, in], bias [out] or undefined):
//   forward  y  = (q(x s_x) q(w s_w)) / (s_x s_w) + b          (q: forward_format)
//   backward dx = (q(g s_g) q(w s_w)) / (s_g s_w),  dw = (q(g s_g)^T q(x s_x)) / (s_g s_x),
//            db = sum g (from the unquantized g)                 (q(g): backward_format)
// The amaxes are raised where gradients are recorded (training), not under NoGradGuard.
// Keeps q(x) and q(w) for backward, in x's and weight's dtypes.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const std::shared_ptr<Fp8LinearScaling>& scaling);

// fp8_linear where `scaling` is given, linear (in the operands' dtype) where it is null: the
// GEMM of a layer that FP8 training may or may not have enabled.
Tensor linear_or_fp8(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const std::shared_ptr<Fp8LinearScaling>& scaling);

}  // namespace tessera
