// FP8 casts and the FP8 linear (tessera/autograd/fp8_linear.h); the kernels are
// backends/*/fp8_cast.*.
#include <cmath>

#include "op_util.h"
#include "tessera/autograd/fp8_linear.h"
#include "tessera/autograd/function.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera {

Tensor fp8_cast(const Tensor& x, float scale, Fp8Format format, Tensor* amax) {
  detail::check_floating("fp8_cast", x);
  TS_CHECK(std::isfinite(scale) && scale > 0, "fp8_cast: the scale must be a positive number, got ",
           scale);
  if (amax) {
    Tensor& m = *amax;
    if (!m.defined()) m = zeros({1}, DType::Float32, x.device());
    TS_CHECK(m.dtype() == DType::Float32 && m.numel() == 1 && m.device() == x.device() &&
                 m.is_contiguous(),
             "fp8_cast: amax must be one float32 on ", x.device().str(), ", got ", m.describe());
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const TensorBase ins[1] = {detail::untracked(x).contiguous()};
  // Without an amax the kernel has one output and reduces nothing (evaluation's casts).
  TensorBase outs[2] = {out, amax ? TensorBase(*amax) : TensorBase()};
  KernelAttrs a;
  a.scalar = scale;
  a.index = static_cast<int64_t>(format);
  run_kernel(Kernel::fp8_cast, x.device(), x.dtype(), ins,
             std::span<TensorBase>(outs, amax ? 2 : 1), a);
  return out;
}

namespace {

// The product of two FP8 operands, as cuBLASLt gives it: float32 accumulation, times the
// inverse scales (alpha, in float32), plus a float32 bias, rounded once to `dtype`.
Tensor fp8_gemm(const Tensor& a, const Tensor& b_transposed, float inv_a, float inv_b,
                const Tensor& bias, DType dtype) {
  const float alpha = inv_a * inv_b;
  Tensor y = linear(a.to(DType::Float32), b_transposed.to(DType::Float32)) * double{alpha};
  if (bias.defined()) y = y + bias.to(DType::Float32);
  return y.to(dtype);
}

}  // namespace

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const std::shared_ptr<Fp8LinearScaling>& scaling) {
  TS_CHECK(scaling, "fp8_linear: no scaling state");
  TS_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.shape().back() == weight.shape()[1],
           "fp8_linear: input ", x.describe(), " does not match weight ", weight.describe());
  TS_CHECK(!bias.defined() || bias.shape() == Shape({weight.shape()[0]}), "fp8_linear: bias ",
           bias.describe(), " does not match weight ", weight.describe());
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  const bool record = grad_enabled();
  const std::shared_ptr<Fp8LinearScaling> s = scaling;
  return autograd::CustomFunction::apply(
      inputs,
      [s, record](autograd::FunctionContext& ctx, const std::vector<Tensor>& in) {
        const Fp8Format f = s->forward_format;
        const Tensor qx = fp8_cast(in[0], s->input.scale, f, record ? &s->input.amax : nullptr);
        const Tensor qw = fp8_cast(in[1], s->weight.scale, f, record ? &s->weight.amax : nullptr);
        const float inv_x = 1.0f / s->input.scale, inv_w = 1.0f / s->weight.scale;
        ctx.save_for_backward({qx, qw});
        ctx.data["inv_x"] = inv_x;
        ctx.data["inv_w"] = inv_w;
        const Tensor bias_in = in.size() > 2 ? in[2] : Tensor();
        if (bias_in.defined()) ctx.data["bias_dtype"] = bias_in.dtype();
        return std::vector<Tensor>{fp8_gemm(qx, qw, inv_x, inv_w, bias_in, in[0].dtype())};
      },
      [s](autograd::FunctionContext& ctx, const std::vector<Tensor>& g) {
        const std::vector<Tensor> saved = ctx.saved();
        const Tensor &qx = saved[0], &qw = saved[1];
        const auto inv_x = std::any_cast<float>(ctx.data["inv_x"]);
        const auto inv_w = std::any_cast<float>(ctx.data["inv_w"]);
        const int64_t in_features = qw.shape()[1], out_features = qw.shape()[0];
        const Tensor grad = g[0].reshape({-1, out_features});
        const Tensor qg =
            fp8_cast(grad, s->grad_output.scale, s->backward_format, &s->grad_output.amax);
        const float inv_g = 1.0f / s->grad_output.scale;
        std::vector<Tensor> grads{
            fp8_gemm(qg, qw.t(), inv_g, inv_w, {}, qx.dtype()).reshape(qx.shape()),
            fp8_gemm(qg.t(), qx.reshape({-1, in_features}).t(), inv_g, inv_x, {}, qw.dtype())};
        if (ctx.data.count("bias_dtype"))
          grads.push_back(
              sum(grad.to(DType::Float32), {0}).to(std::any_cast<DType>(ctx.data["bias_dtype"])));
        return grads;
      },
      "Fp8Linear")[0];
}

Tensor linear_or_fp8(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     const std::shared_ptr<Fp8LinearScaling>& scaling) {
  return scaling ? fp8_linear(x, weight, bias, scaling) : linear(x, weight, bias);
}

}  // namespace tessera
