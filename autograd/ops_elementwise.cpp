// Elementwise ops with broadcasting and type promotion, each beside its gradient.
#include <cmath>

#include "op_util.h"

namespace tessera {

using autograd::record;
using detail::run1;
using detail::sum_to_shape;
using detail::untracked;

namespace {

// Broadcasts a and b to a common shape and promotes them to a common dtype.
std::pair<Tensor, Tensor> broadcast_pair(const char* op, const Tensor& a, const Tensor& b,
                                         DType dtype) {
  detail::check_same_device(op, {a, b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  NoGradGuard no_grad;  // the broadcast views are internal; gradients are reduced by hand
  return {a.to(dtype).expand(shape), b.to(dtype).expand(shape)};
}

Tensor binary_forward(Kernel k, const char* op, const Tensor& a, const Tensor& b, DType dtype,
                      DType out_dtype) {
  auto [ea, eb] = broadcast_pair(op, a, b, dtype);
  return run1(k, {ea, eb}, ea.shape(), out_dtype, dtype);
}

Tensor unary_forward(Kernel k, const Tensor& x) {
  const Tensor c = x.contiguous();
  return run1(k, {untracked(c)}, c.shape(), c.dtype(), c.dtype());
}

DType arith_dtype(const Tensor& a, const Tensor& b) {
  // A 0-dim operand (a Python-style scalar) does not widen a tensor's floating dtype.
  if (a.dim() == 0 && b.dim() > 0 && is_floating(b.dtype())) return b.dtype();
  if (b.dim() == 0 && a.dim() > 0 && is_floating(a.dtype())) return a.dtype();
  return promote_types(a.dtype(), b.dtype());
}

Tensor scalar_like(double v, const Tensor& like) {
  return scalar_tensor(v, is_floating(like.dtype()) ? like.dtype() : DType::Float32, like.device());
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  std::vector<Tensor> outs{
      binary_forward(Kernel::add, "add", a, b, arith_dtype(a, b), arith_dtype(a, b))};
  record("AddBackward", {a, b}, outs,
         [sa = a.shape(), sb = b.shape()](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{sum_to_shape(g[0], sa), sum_to_shape(g[0], sb)};
         });
  return outs[0];
}

Tensor sub(const Tensor& a, const Tensor& b) {
  std::vector<Tensor> outs{
      binary_forward(Kernel::sub, "sub", a, b, arith_dtype(a, b), arith_dtype(a, b))};
  record("SubBackward", {a, b}, outs,
         [sa = a.shape(), sb = b.shape()](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{sum_to_shape(g[0], sa), sum_to_shape(neg(g[0]), sb)};
         });
  return outs[0];
}

Tensor mul(const Tensor& a, const Tensor& b) {
  std::vector<Tensor> outs{
      binary_forward(Kernel::mul, "mul", a, b, arith_dtype(a, b), arith_dtype(a, b))};
  const bool ga = a.requires_grad(), gb = b.requires_grad();
  record("MulBackward", {a, b}, outs,
         [ua = untracked(a), ub = untracked(b), ga, gb](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{
               ga ? sum_to_shape(mul(g[0], ub), ua.shape()).to(ua.dtype()) : Tensor(),
               gb ? sum_to_shape(mul(g[0], ua), ub.shape()).to(ub.dtype()) : Tensor()};
         },
         {a, b});
  return outs[0];
}

Tensor div(const Tensor& a, const Tensor& b) {
  DType dt = arith_dtype(a, b);
  if (!is_floating(dt)) dt = DType::Float32;  // true division, as torch's `/`
  std::vector<Tensor> outs{binary_forward(Kernel::div, "div", a, b, dt, dt)};
  const bool gb = b.requires_grad();
  record("DivBackward", {a, b}, outs,
         [ua = untracked(a), ub = untracked(b), gb](const std::vector<Tensor>& g) {
           Tensor ga = sum_to_shape(div(g[0], ub), ua.shape());
           Tensor gbv =
               gb ? sum_to_shape(neg(div(mul(g[0], ua), mul(ub, ub))), ub.shape()) : Tensor();
           return std::vector<Tensor>{ga, gbv};
         },
         {a, b});
  return outs[0];
}

Tensor pow(const Tensor& a, const Tensor& b) {
  DType dt = arith_dtype(a, b);
  if (!is_floating(dt)) dt = DType::Float32;
  std::vector<Tensor> outs{binary_forward(Kernel::pow, "pow", a, b, dt, dt)};
  const bool gb = b.requires_grad();
  record("PowBackward", {a, b}, outs,
         [ua = untracked(a), ub = untracked(b), y = untracked(outs[0]),
          gb](const std::vector<Tensor>& g) {
           // d/da = b * a^(b-1); d/db = a^b * log(a) (taken as 0 where a == 0)
           Tensor ga =
               sum_to_shape(mul(g[0], mul(ub, pow(ua, sub(ub, scalar_like(1.0, ub))))), ua.shape());
           Tensor gbv;
           if (gb) {
             Tensor loga = where(eq(ua, scalar_like(0.0, ua)), zeros_like(ua.to(y.dtype())),
                                 log(ua.to(y.dtype())));
             gbv = sum_to_shape(mul(g[0], mul(y, loga)), ub.shape());
           }
           return std::vector<Tensor>{ga, gbv};
         },
         {a, b});
  return outs[0];
}

Tensor pow(const Tensor& a, double exponent) {
  return pow(a, scalar_like(exponent, a));
}

Tensor neg(const Tensor& x) {
  std::vector<Tensor> outs{unary_forward(Kernel::neg, x)};
  record("NegBackward", {x}, outs,
         [](const std::vector<Tensor>& g) { return std::vector<Tensor>{neg(g[0])}; });
  return outs[0];
}

Tensor exp(const Tensor& x) {
  detail::check_floating("exp", x);
  std::vector<Tensor> outs{unary_forward(Kernel::exp, x)};
  record("ExpBackward", {x}, outs,
         [y = untracked(outs[0])](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{mul(g[0], y)};
         },
         {outs[0]});
  return outs[0];
}

Tensor log(const Tensor& x) {
  detail::check_floating("log", x);
  std::vector<Tensor> outs{unary_forward(Kernel::log, x)};
  record("LogBackward", {x}, outs,
         [ux = untracked(x)](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{div(g[0], ux)};
         },
         {x});
  return outs[0];
}

Tensor sqrt(const Tensor& x) {
  detail::check_floating("sqrt", x);
  std::vector<Tensor> outs{unary_forward(Kernel::sqrt, x)};
  record("SqrtBackward", {x}, outs,
         [y = untracked(outs[0])](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{div(g[0], mul(y, scalar_like(2.0, y)))};
         },
         {outs[0]});
  return outs[0];
}

Tensor rsqrt(const Tensor& x) {
  detail::check_floating("rsqrt", x);
  std::vector<Tensor> outs{unary_forward(Kernel::rsqrt, x)};
  record("RsqrtBackward", {x}, outs,
         [y = untracked(outs[0])](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{mul(g[0], mul(pow(y, 3.0), scalar_like(-0.5, y)))};
         },
         {outs[0]});
  return outs[0];
}

Tensor abs(const Tensor& x) {
  std::vector<Tensor> outs{unary_forward(Kernel::abs, x)};
  record("AbsBackward", {x}, outs,
         [ux = untracked(x)](const std::vector<Tensor>& g) {
           const Tensor zero = scalar_like(0.0, ux);
           Tensor sign = sub(gt(ux, zero).to(ux.dtype()), lt(ux, zero).to(ux.dtype()));
           return std::vector<Tensor>{mul(g[0], sign)};
         },
         {x});
  return outs[0];
}

Tensor tanh(const Tensor& x) {
  detail::check_floating("tanh", x);
  std::vector<Tensor> outs{unary_forward(Kernel::tanh, x)};
  record("TanhBackward", {x}, outs,
         [y = untracked(outs[0])](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{mul(g[0], sub(scalar_like(1.0, y), mul(y, y)))};
         },
         {outs[0]});
  return outs[0];
}

Tensor sigmoid(const Tensor& x) {
  detail::check_floating("sigmoid", x);
  std::vector<Tensor> outs{unary_forward(Kernel::sigmoid, x)};
  record("SigmoidBackward", {x}, outs,
         [y = untracked(outs[0])](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{mul(g[0], mul(y, sub(scalar_like(1.0, y), y)))};
         },
         {outs[0]});
  return outs[0];
}

Tensor relu(const Tensor& x) {
  std::vector<Tensor> outs{unary_forward(Kernel::relu, x)};
  record("ReluBackward", {x}, outs,
         [y = untracked(outs[0])](const std::vector<Tensor>& g) {
           return std::vector<Tensor>{where(gt(y, scalar_like(0.0, y)), g[0], zeros_like(g[0]))};
         },
         {outs[0]});
  return outs[0];
}

Tensor gelu(const Tensor& x, GeluApprox approximate) {
  detail::check_floating("gelu", x);
  const bool tanh_approx = approximate == GeluApprox::Tanh;
  const Tensor xc = x.contiguous();
  std::vector<Tensor> outs{unary_forward(tanh_approx ? Kernel::gelu_tanh : Kernel::gelu, xc)};
  record(tanh_approx ? "GeluTanhBackward" : "GeluBackward", {xc}, outs,
         [ux = untracked(xc), tanh_approx](const std::vector<Tensor>& g) {
           const Tensor gc = g[0].contiguous();
           return std::vector<Tensor>{
               run1(tanh_approx ? Kernel::gelu_tanh_backward : Kernel::gelu_backward, {gc, ux},
                    ux.shape(), ux.dtype(), ux.dtype())};
         },
         {xc});
  return outs[0];
}

Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
Tensor operator-(const Tensor& x) {
  return neg(x);
}
Tensor operator+(const Tensor& a, double b) {
  return add(a, scalar_like(b, a));
}
Tensor operator-(const Tensor& a, double b) {
  return sub(a, scalar_like(b, a));
}
Tensor operator*(const Tensor& a, double b) {
  return mul(a, scalar_like(b, a));
}
Tensor operator/(const Tensor& a, double b) {
  return div(a, scalar_like(b, a));
}
Tensor operator*(double a, const Tensor& b) {
  return mul(scalar_like(a, b), b);
}

#define TS_COMPARE(name)                                                              \
  Tensor name(const Tensor& a, const Tensor& b) {                                     \
    return binary_forward(Kernel::name, #name, a, b, arith_dtype(a, b), DType::Bool); \
  }
TS_COMPARE(eq)
TS_COMPARE(ne)
TS_COMPARE(lt)
TS_COMPARE(le)
TS_COMPARE(gt)
TS_COMPARE(ge)
#undef TS_COMPARE

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  TS_CHECK(condition.dtype() == DType::Bool, "where: condition must be bool, got ",
           condition.describe());
  detail::check_same_device("where", {condition, a, b});
  const DType dt = arith_dtype(a, b);
  const Shape shape =
      broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out;
  {
    NoGradGuard no_grad;
    out = run1(Kernel::where,
               {condition.expand(shape), a.to(dt).expand(shape), b.to(dt).expand(shape)}, shape, dt,
               dt);
  }
  std::vector<Tensor> outs{out};
  record("WhereBackward", {condition, a, b}, outs,
         [c = untracked(condition), sa = a.shape(), sb = b.shape()](const std::vector<Tensor>& g) {
           const Tensor z = zeros_like(g[0]);
           return std::vector<Tensor>{Tensor(), sum_to_shape(where(c, g[0], z), sa),
                                      sum_to_shape(where(c, z, g[0]), sb)};
         });
  return outs[0];
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return where(mask, scalar_like(value, x).to(x.dtype()), x);
}

}  // namespace tessera
