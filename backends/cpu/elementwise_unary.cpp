// Unary elementwise kernels on contiguous inputs, vectorised through Eigen array expressions,
// and GELU fused with the bias add before it (bias_gelu). 16-bit floats are widened to float in
// small blocks, computed, and narrowed back.
#include <unsupported/Eigen/SpecialFunctions>

#include "cpu_types.h"
#include "flushed_exp.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kBlock = 1024;

// Calls f(start, len) for the blocks [k * kBlock, (k + 1) * kBlock) of [0, n), over threads.
// Eigen computes an expression's elements in vector packets from the first aligned one and the
// rest one by one, and its scalar exp, erf or rsqrt round differently from its packet ones: so
// the blocks sit at fixed positions (outputs are 64-byte aligned, kBlock elements a whole
// number of packets), and each element goes the same path whatever the thread count.
template <class F>
void for_blocks(int64_t n, F&& f) {
  parallel_for((n + kBlock - 1) / kBlock, 16, [&](int64_t b0, int64_t b1) {
    for (int64_t k = b0; k < b1; ++k) f(k * kBlock, std::min(kBlock, n - k * kBlock));
  });
}

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
  for_blocks(n, [&](int64_t s, int64_t len) {
    if constexpr (std::is_same_v<T, C>) {
      Eigen::Map<Arr> out(y + s, len);
      if constexpr (kArity == 1)
        out = Op::apply(MapC(x0 + s, len));
      else
        out = Op::apply(MapC(x0 + s, len), MapC(x1 + s, len));
    } else {
      alignas(64) C buf0[kBlock];
      alignas(64) C buf1[kBlock];
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
// d/dx of 0.5 x (1 + tanh(u)), u = c (x + 0.044715 x^3), with tanh(u) computed once per block;
// fill_x(s, len, out) writes elements [s, s + len)'s x in the compute type to out.
template <class T, class FillX>
void gelu_tanh_backward_of(const KernelCall& c, FillX fill_x) {
  using C = compute_t<T>;
  using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
  const int64_t n = c.outputs[0].numel();
  const T* g = c.inputs[0].data<T>();
  T* y = c.outputs[0].data<T>();
  for_blocks(n, [&](int64_t s, int64_t len) {
    alignas(64) C xs[kBlock];
    alignas(64) C t[kBlock];
    fill_x(s, len, xs);
    const Eigen::Map<const Arr> xv(xs, len);
    Eigen::Map<Arr>(t, len) = (C(kSqrt2OverPi) * (xv + C(0.044715) * xv * xv * xv)).tanh();
    for (int64_t i = 0; i < len; ++i) {
      const C xi = xs[i], ti = t[i];
      const C du = C(kSqrt2OverPi) * (C(1) + C(3 * 0.044715) * xi * xi);
      y[s + i] =
          T(C(load(g[s + i])) * (C(0.5) * (C(1) + ti) + C(0.5) * xi * (C(1) - ti * ti) * du));
    }
  });
}
template <class T>
void gelu_tanh_backward(const KernelCall& c) {
  const T* x = c.inputs[1].data<T>();
  gelu_tanh_backward_of<T>(c, [x](int64_t s, int64_t len, compute_t<T>* out) {
    for (int64_t i = 0; i < len; ++i) out[i] = load(x[s + i]);
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

// bias_gelu: inputs x [rows * C] and bias [C]; y = gelu(z) with z = x + bias rounded to T, as
// add gives it, then the GELU kernels' expressions above on z: one pass for both ops.
// bias_gelu_backward: inputs g, x, bias; the GELU gradient at z. attrs.flag: the tanh form.
// z for elements [s, s + len) into out (the bias's column walked, not divided for).
template <class T>
void fill_biased(const T* x, const T* bias, int64_t width, int64_t s, int64_t len,
                 compute_t<T>* out) {
  int64_t col = s % width;
  for (int64_t i = 0; i < len; ++i) {
    out[i] = load(store<T>(load(x[s + i]) + load(bias[col])));
    if (++col == width) col = 0;
  }
}
template <class T>
struct BiasGelu {
  static void run(const KernelCall& c) {
    using C = compute_t<T>;
    using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
    const T* x = c.inputs[0].data<T>();
    const T* bias = c.inputs[1].data<T>();
    const int64_t width = c.inputs[1].numel();
    T* y = c.outputs[0].data<T>();
    for_blocks(c.outputs[0].numel(), [&](int64_t s, int64_t len) {
      alignas(64) C buf[kBlock];
      fill_biased(x, bias, width, s, len, buf);
      Eigen::Map<Arr> z(buf, len);
      const Eigen::Map<const Arr> in(buf, len);
      if (c.attrs.flag)
        z = GeluTanh::apply(in);
      else
        z = Gelu::apply(in);
      for (int64_t i = 0; i < len; ++i) y[s + i] = T(buf[i]);
    });
  }
};
template <class T>
struct BiasGeluBackward {
  static void run(const KernelCall& c) {
    using C = compute_t<T>;
    using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
    const T* x = c.inputs[1].data<T>();
    const T* bias = c.inputs[2].data<T>();
    const int64_t width = c.inputs[2].numel();
    if (c.attrs.flag) {
      gelu_tanh_backward_of<T>(
          c, [&](int64_t s, int64_t len, C* out) { fill_biased(x, bias, width, s, len, out); });
      return;
    }
    const T* g = c.inputs[0].data<T>();
    T* y = c.outputs[0].data<T>();
    for_blocks(c.outputs[0].numel(), [&](int64_t s, int64_t len) {
      alignas(64) C gs[kBlock];
      alignas(64) C zs[kBlock];
      for (int64_t i = 0; i < len; ++i) gs[i] = load(g[s + i]);
      fill_biased(x, bias, width, s, len, zs);
      Eigen::Map<Arr>(gs, len) =
          GeluBackward::apply(Eigen::Map<const Arr>(gs, len), Eigen::Map<const Arr>(zs, len));
      for (int64_t i = 0; i < len; ++i) y[s + i] = T(gs[i]);
    });
  }
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
  register_floating<BiasGelu>(Kernel::bias_gelu);
  register_floating<BiasGeluBackward>(Kernel::bias_gelu_backward);
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
