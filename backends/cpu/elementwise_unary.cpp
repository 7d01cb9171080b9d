// Unary elementwise kernels on contiguous inputs, vectorised through Eigen array expressions.
// 16-bit floats are widened to float in small blocks, computed, and narrowed back.
#include <unsupported/Eigen/SpecialFunctions>

#include "cpu_types.h"
#include "flushed_exp.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kBlock = 1024;

// Applies Op::apply over Eigen arrays for `arity` contiguous inputs of the same length.
template <class Op, class T, int kArity>
void map_kernel(const KernelCall& c) {
  using C = compute_t<T>;
  using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
  using MapC = Eigen::Map<const Arr>;
  const int64_t n = c.outputs[0].numel();
  T* y = c.outputs[0].data<T>();
  const T* x0 = c.inputs[0].data<T>();
  const T* x1 = kArity > 1 ? c.inputs[1].data<T>() : nullptr;
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
    if constexpr (std::is_same_v<T, C>) {
      Eigen::Map<Arr> out(y + b, e - b);
      if constexpr (kArity == 1)
        out = Op::apply(MapC(x0 + b, e - b));
      else
        out = Op::apply(MapC(x0 + b, e - b), MapC(x1 + b, e - b));
    } else {
      C buf0[kBlock], buf1[kBlock];
      for (int64_t s = b; s < e; s += kBlock) {
        const int64_t len = std::min(kBlock, e - s);
        for (int64_t i = 0; i < len; ++i) buf0[i] = load(x0[s + i]);
        if constexpr (kArity > 1)
          for (int64_t i = 0; i < len; ++i) buf1[i] = load(x1[s + i]);
        Eigen::Map<Arr> a0(buf0, len);
        if constexpr (kArity == 1)
          a0 = Op::apply(MapC(buf0, len));
        else
          a0 = Op::apply(MapC(buf0, len), MapC(buf1, len));
        for (int64_t i = 0; i < len; ++i) y[s + i] = T(buf0[i]);
      }
    }
  });
}

#define TS_UNARY(Name, expr)                                            \
  struct Name {                                                         \
    template <class A>                                                  \
    static auto apply(const A& x) {                                     \
      using S = typename A::Scalar;                                     \
      (void)sizeof(S);                                                  \
      return expr;                                                      \
    }                                                                   \
  };                                                                    \
  template <class T>                                                    \
  struct Name##Kernel {                                                 \
    static void run(const KernelCall& c) { map_kernel<Name, T, 1>(c); } \
  };

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;

TS_UNARY(Neg, -x)
TS_UNARY(Exp, exp_flush_subnormal(x))
TS_UNARY(Log, x.log())
TS_UNARY(Sqrt, x.sqrt())
TS_UNARY(Rsqrt, x.rsqrt())
TS_UNARY(Abs, x.abs())
TS_UNARY(Tanh, x.tanh())
TS_UNARY(Sigmoid, sigmoid_flush_subnormal(x))
TS_UNARY(Relu, x.max(S(0)))
TS_UNARY(Gelu, S(0.5) * x * (S(1) + (x * S(kSqrtHalf)).erf()))
TS_UNARY(GeluTanh, S(0.5) * x * (S(1) + (S(kSqrt2OverPi) * (x + S(0.044715) * x * x * x)).tanh()))

// gelu'(x) = Phi(x) + x * phi(x)
struct GeluBackward {
  template <class A, class B>
  static auto apply(const A& g, const B& x) {
    using S = typename A::Scalar;
    const S inv_sqrt_2pi = S(0.39894228040143267794);
    return g * (S(0.5) * (S(1) + (x * S(kSqrtHalf)).erf()) +
                x * inv_sqrt_2pi * exp_flush_subnormal(S(-0.5) * x * x));
  }
};
// d/dx of 0.5 x (1 + tanh(u)), u = c (x + 0.044715 x^3), with tanh(u) computed once per block.
template <class T>
void gelu_tanh_backward(const KernelCall& c) {
  using C = compute_t<T>;
  using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
  const int64_t n = c.outputs[0].numel();
  const T* g = c.inputs[0].data<T>();
  const T* x = c.inputs[1].data<T>();
  T* y = c.outputs[0].data<T>();
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
    Arr xs(kBlock), t(kBlock);
    for (int64_t s = b; s < e; s += kBlock) {
      const int64_t len = std::min(kBlock, e - s);
      for (int64_t i = 0; i < len; ++i) xs[i] = load(x[s + i]);
      auto xv = xs.head(len);
      t.head(len) = (C(kSqrt2OverPi) * (xv + C(0.044715) * xv * xv * xv)).tanh();
      for (int64_t i = 0; i < len; ++i) {
        const C xi = xs[i], ti = t[i];
        const C du = C(kSqrt2OverPi) * (C(1) + C(3 * 0.044715) * xi * xi);
        y[s + i] =
            T(C(load(g[s + i])) * (C(0.5) * (C(1) + ti) + C(0.5) * xi * (C(1) - ti * ti) * du));
      }
    }
  });
}
template <class T>
struct GeluBackwardKernel {
  static void run(const KernelCall& c) { map_kernel<GeluBackward, T, 2>(c); }
};
template <class T>
struct GeluTanhBackwardKernel {
  static void run(const KernelCall& c) { gelu_tanh_backward<T>(c); }
};

// Integer neg/abs/relu: plain loops (Eigen's float-only functions do not apply).
template <class T>
struct IntUnary {
  template <class F>
  static void apply(const KernelCall& c, F f) {
    const T* x = c.inputs[0].data<T>();
    T* y = c.outputs[0].data<T>();
    for (int64_t i = 0, n = c.outputs[0].numel(); i < n; ++i) y[i] = f(x[i]);
  }
  static void neg(const KernelCall& c) {
    apply(c, [](T v) { return static_cast<T>(-v); });
  }
  static void abs(const KernelCall& c) {
    apply(c, [](T v) { return v < 0 ? static_cast<T>(-v) : v; });
  }
  static void relu(const KernelCall& c) {
    apply(c, [](T v) { return v < 0 ? T(0) : v; });
  }
};

const bool registered = [] {
  register_floating<NegKernel>(Kernel::neg);
  register_floating<ExpKernel>(Kernel::exp);
  register_floating<LogKernel>(Kernel::log);
  register_floating<SqrtKernel>(Kernel::sqrt);
  register_floating<RsqrtKernel>(Kernel::rsqrt);
  register_floating<AbsKernel>(Kernel::abs);
  register_floating<TanhKernel>(Kernel::tanh);
  register_floating<SigmoidKernel>(Kernel::sigmoid);
  register_floating<ReluKernel>(Kernel::relu);
  register_floating<GeluKernel>(Kernel::gelu);
  register_floating<GeluTanhKernel>(Kernel::gelu_tanh);
  register_floating<GeluBackwardKernel>(Kernel::gelu_backward);
  register_floating<GeluTanhBackwardKernel>(Kernel::gelu_tanh_backward);
  for (DType d : {DType::Int32, DType::Int64}) {
    const bool i32 = d == DType::Int32;
    register_kernel(Kernel::neg, DeviceType::CPU, d,
                    i32 ? &IntUnary<int32_t>::neg : &IntUnary<int64_t>::neg);
    register_kernel(Kernel::abs, DeviceType::CPU, d,
                    i32 ? &IntUnary<int32_t>::abs : &IntUnary<int64_t>::abs);
    register_kernel(Kernel::relu, DeviceType::CPU, d,
                    i32 ? &IntUnary<int32_t>::relu : &IntUnary<int64_t>::relu);
  }
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
