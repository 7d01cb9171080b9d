// Element-wise ops fused with the bias add of the GEMM before them (DeepSpeed's transformer
// kernel: bias + GELU, bias + dropout + residual): one pass instead of two or three, the same
// values as the ops one after another. The kernels are bias_gelu / bias_gelu_backward
// (backends/*/elementwise_unary.*) and bias_dropout_add (backends/*/dropout.*).
#include "op_util.h"
#include "tessera/ops.h"

namespace tessera {

using autograd::record;
using detail::run1;
using detail::untracked;

namespace {

void check_bias(const char* op, const Tensor& x, const Tensor& bias) {
  detail::check_floating(op, x);
  TS_CHECK(x.dim() >= 1 && bias.dim() == 1 && bias.size(0) == x.shape().back() &&
               bias.dtype() == x.dtype() && bias.device() == x.device(),
           op, ": bias must be [", x.dim() >= 1 ? x.shape().back() : 0, "] of ", x.describe(),
           "'s dtype and device, got ", bias.describe());
}

}  // namespace

Tensor bias_gelu(const Tensor& x, const Tensor& bias, GeluApprox approximate) {
  check_bias("bias_gelu", x, bias);
  const Tensor xc = x.contiguous(), bc = bias.contiguous();
  KernelAttrs a;
  a.flag = approximate == GeluApprox::Tanh;
  std::vector<Tensor> outs{
      run1(Kernel::bias_gelu, {untracked(xc), untracked(bc)}, xc.shape(), x.dtype(), x.dtype(), a)};
  record(a.flag ? "BiasGeluTanhBackward" : "BiasGeluBackward", {xc, bc}, outs,
         [ux = untracked(xc), ub = untracked(bc), a](const std::vector<Tensor>& g) {
           const Tensor dz = run1(Kernel::bias_gelu_backward, {g[0].contiguous(), ux, ub},
                                  ux.shape(), ux.dtype(), ux.dtype(), a);
           return std::vector<Tensor>{dz, detail::sum_to_shape(dz, ub.shape())};
         },
         {xc, bc});
  return outs[0];
}

namespace {

// residual + dropout(x + bias) over a contiguous block whose elements use counters seed,
// offset + i; backward is the dropout kernel on the gradient.
Tensor bias_dropout_add_block(const Tensor& x, const Tensor& bias, const Tensor& residual, double p,
                              GeneratorState s) {
  KernelAttrs a;
  a.scalar = p;
  a.seed = s.seed;
  a.offset = s.offset;
  std::vector<TensorBase> ins{untracked(x).contiguous(), untracked(residual).contiguous()};
  if (bias.defined()) ins.push_back(untracked(bias).contiguous());
  std::vector<Tensor> outs{run1(Kernel::bias_dropout_add, ins, x.shape(), x.dtype(), x.dtype(), a)};
  record("BiasDropoutAddBackward", {x, residual, bias}, outs,
         [a, bias_shape = bias.defined() ? bias.shape() : Shape{}](const std::vector<Tensor>& g) {
           const Tensor gc = g[0].contiguous();
           const Tensor dz = run1(Kernel::dropout, {gc}, gc.shape(), gc.dtype(), gc.dtype(), a);
           return std::vector<Tensor>{
               dz, g[0], bias_shape.empty() ? Tensor() : detail::sum_to_shape(dz, bias_shape)};
         });
  return outs[0];
}

}  // namespace

Tensor bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, double p,
                        bool training, Generator* gen) {
  TS_CHECK(p >= 0.0 && p <= 1.0, "bias_dropout_add: probability must be in [0, 1], got ", p);
  if (bias.defined())
    check_bias("bias_dropout_add", x, bias);
  else
    detail::check_floating("bias_dropout_add", x);
  TS_CHECK(residual.shape() == x.shape() && residual.dtype() == x.dtype() &&
               residual.device() == x.device(),
           "bias_dropout_add: the residual ", residual.describe(), " must be like x ",
           x.describe());
  if (!training || p == 0.0) return residual + (bias.defined() ? x + bias : x);
  return detail::over_dropout_blocks(
      "bias_dropout_add", x, gen, [&](int64_t row, GeneratorState s) {
        const auto part = [row](const Tensor& t) { return row < 0 ? t : t.narrow(0, row, 1); };
        return bias_dropout_add_block(part(x), bias, part(residual), p, s);
      });
}

}  // namespace tessera
