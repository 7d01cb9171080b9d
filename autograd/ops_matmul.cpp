// matmul with torch.matmul's rules (1-D promotion, broadcast batch dims), built from one
// differentiable primitive: a batched product of [batch, M, K] and [batch, K, N] views.
#include "op_util.h"

namespace tessera {

using autograd::record;
using detail::untracked;

namespace {

// a [batch, M, K] @ b [batch, K, N]; a broadcast batch arrives as a stride-0 expanded view,
// whose gradient the expand's own backward sums.
Tensor bmm3(const Tensor& a, const Tensor& b) {
  TS_CHECK(a.shape()[0] == b.shape()[0] && a.shape()[2] == b.shape()[1], "matmul: batched shapes ",
           shape_str(a.shape()), " and ", shape_str(b.shape()), " do not match");
  const Shape out_shape{a.shape()[0], a.shape()[1], b.shape()[2]};
  const DType dt = a.dtype();
  std::vector<Tensor> outs{
      detail::run1(Kernel::matmul, {untracked(a), untracked(b)}, out_shape, dt, dt)};
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  record("MatmulBackward", {a, b}, outs,
         [ua = untracked(a), ub = untracked(b), ga, gb](const std::vector<Tensor>& g) {
           Tensor da, db;
           if (ga && autograd::input_grad_wanted(0)) da = bmm3(g[0], ub.transpose(1, 2));
           if (gb && autograd::input_grad_wanted(1)) db = bmm3(ua.transpose(1, 2), g[0]);
           return std::vector<Tensor>{da, db};
         },
         {a, b});
  return outs[0];
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  TS_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1,
           "matmul: both operands need at least 1 dimension, got ", a_in.describe(), " and ",
           b_in.describe());
  detail::check_same_device("matmul", {a_in, b_in});
  const DType dt = promote_types(a_in.dtype(), b_in.dtype());
  TS_CHECK(is_floating(dt), "matmul: expected floating-point operands, got ", a_in.describe(),
           " and ", b_in.describe());
  Tensor a = a_in.to(dt), b = b_in.to(dt);
  const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
  if (a_vec) a = a.unsqueeze(0);
  if (b_vec) b = b.unsqueeze(1);
  const int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1];
  const int64_t N = b.shape()[b.dim() - 1];
  TS_CHECK(b.shape()[b.dim() - 2] == K, "matmul: inner dimensions differ: ", a_in.describe(), " @ ",
           b_in.describe(), " (", K, " vs ", b.shape()[b.dim() - 2], ")");
  const Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  const Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t nbatch = numel_of(batch);

  Tensor out;
  if (batch_b.empty() || numel_of(batch_b) == 1) {
    // b is one matrix: fold a's batch into its rows (the Linear-layer case, one big GEMM).
    Tensor a3 = a.expand([&] {
                   Shape s = batch;
                   s.push_back(M);
                   s.push_back(K);
                   return s;
                 }())
                    .reshape({1, nbatch * M, K});
    out = bmm3(a3, b.reshape({1, K, N}));
  } else {
    Shape sa = batch, sb = batch;
    sa.insert(sa.end(), {M, K});
    sb.insert(sb.end(), {K, N});
    out = bmm3(a.expand(sa).reshape({nbatch, M, K}), b.expand(sb).reshape({nbatch, K, N}));
  }
  Shape out_shape = batch;
  if (!a_vec) out_shape.push_back(M);
  if (!b_vec) out_shape.push_back(N);
  return out.reshape(out_shape);
}

namespace {

void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TS_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.shape().back() == weight.shape()[1], op,
           ": input ", x.describe(), " does not match weight ", weight.describe(),
           " (expected [..., ", weight.shape()[1], "])");
  TS_CHECK(!bias.defined() || bias.shape() == Shape{weight.shape()[0]}, op, ": bias ",
           bias.describe(), " does not match weight ", weight.describe());
  TS_CHECK(x.dtype() == weight.dtype() && is_floating(x.dtype()), op, ": input ", x.describe(),
           " and weight ", weight.describe(), " need one floating dtype");
  detail::check_same_device(op, {x, weight, bias});
}

// x2 [1, M, K] @ w^T (+ bias): [1, M, N]. The bias rides in the product (a cuBLASLt epilogue
// on GPUs), added before rounding.
Tensor linear_product(const Tensor& x2, const Tensor& w, const Tensor& bias) {
  const int64_t M = x2.shape()[1], N = w.shape()[0];
  const DType dt = x2.dtype();
  return bias.defined() ? detail::run1(Kernel::matmul, {x2, w.t().unsqueeze(0), untracked(bias)},
                                       {1, M, N}, dt, dt)
                        : detail::run1(Kernel::matmul, {x2, w.t().unsqueeze(0)}, {1, M, N}, dt, dt);
}

// The gradients of y = x2 w^T + b for dy [1, M, N], those wanted (A split backward asks for
// dx first and for the weight products later).
std::vector<Tensor> linear_grads(const Tensor& x2, const Tensor& w, const Tensor& g, bool gx,
                                 bool gw, bool gb) {
  const int64_t M = x2.shape()[1], N = w.shape()[0], K = w.shape()[1];
  const Tensor dy = g.reshape({1, M, N});
  Tensor dx, dw, db;
  if (gx)
    dx = detail::run1(Kernel::matmul, {dy, w.unsqueeze(0)}, {1, M, K}, dy.dtype(), dy.dtype());
  if (gw && gb) {
    // dW = dY^T X, and db = the row sums of dY^T from the same product.
    const TensorBase ins[2] = {dy.transpose(1, 2), x2};
    TensorBase outs[2] = {Tensor::empty({1, N, K}, dy.dtype(), dy.device()),
                          Tensor::empty({N}, dy.dtype(), dy.device())};
    run_kernel(Kernel::matmul, dy.device(), dy.dtype(), ins, outs);
    dw = Tensor(outs[0].view({N, K}));
    db = Tensor(outs[1]);
  } else if (gw) {
    dw = detail::run1(Kernel::matmul, {dy.transpose(1, 2), x2}, {1, N, K}, dy.dtype(), dy.dtype())
             .view({N, K});
  } else if (gb) {
    db = sum(dy.view({M, N}), {0});
  }
  return {dx, dw, db};
}

Shape linear_output_shape(const Tensor& x, const Tensor& weight) {
  Shape out_shape = x.shape();
  out_shape.back() = weight.shape()[0];
  return out_shape;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear("linear", x, weight, bias);
  const int64_t K = weight.shape()[1];
  const int64_t M = numel_of(Shape(x.shape().begin(), x.shape().end() - 1));  // rows, even if K = 0
  const Tensor x2 = untracked(x).reshape({1, M, K});
  const Tensor w = untracked(weight);
  std::vector<Tensor> outs{linear_product(x2, w, bias).view(linear_output_shape(x, weight))};
  const bool gx = x.requires_grad(), gw = weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  record("LinearBackward", {x, weight, bias}, outs,
         [x2, w, gx, gw, gb, xshape = x.shape()](const std::vector<Tensor>& g) {
           std::vector<Tensor> d = linear_grads(x2, w, g[0], gx && autograd::input_grad_wanted(0),
                                                gw && autograd::input_grad_wanted(1),
                                                gb && autograd::input_grad_wanted(2));
           if (d[0].defined()) d[0] = d[0].view(xshape);
           return d;
         },
         {x, weight});
  return outs[0];
}

Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   GeluApprox approximate) {
  check_linear("gelu_linear", x, weight, bias);
  const Kernel act = approximate == GeluApprox::Tanh ? Kernel::gelu_tanh : Kernel::gelu;
  const Kernel act_backward =
      approximate == GeluApprox::Tanh ? Kernel::gelu_tanh_backward : Kernel::gelu_backward;
  const int64_t K = weight.shape()[1];
  const int64_t M = numel_of(Shape(x.shape().begin(), x.shape().end() - 1));
  const Tensor x2 = untracked(x).contiguous().reshape({1, M, K});
  const Tensor w = untracked(weight);
  // The GELU output lives only for the product (and again during backward).
  const auto activation = [x2, act] {
    return detail::run1(act, {x2}, x2.shape(), x2.dtype(), x2.dtype());
  };
  std::vector<Tensor> outs{
      linear_product(activation(), w, bias).view(linear_output_shape(x, weight))};
  const bool gx = x.requires_grad(), gw = weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  record("GeluLinearBackward", {x, weight, bias}, outs,
         [x2, w, gx, gw, gb, activation, act_backward,
          xshape = x.shape()](const std::vector<Tensor>& g) {
           const bool want_x = gx && autograd::input_grad_wanted(0);
           std::vector<Tensor> d =
               linear_grads(activation(), w, g[0], want_x, gw && autograd::input_grad_wanted(1),
                            gb && autograd::input_grad_wanted(2));
           if (want_x)
             d[0] = detail::run1(act_backward, {d[0].contiguous(), x2}, x2.shape(), x2.dtype(),
                                 x2.dtype())
                        .view(xshape);
           return d;
         },
         {x, weight});
  return outs[0];
}

}  // namespace tessera
