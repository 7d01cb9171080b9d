// Unary elementwise kernels on contiguous inputs (the op layer makes them so), the GELU
// backward passes (inputs: grad, x), and GELU fused with the bias add before it (bias_gelu).
// 16-bit floats compute in float.
#include "elementwise.cuh"

namespace tessera::cuda {
namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// Each functor maps one value in the compute type C.
#define TS_CUDA_UNARY(Name, expr) \
  struct Name {                   \
    template <class C>            \
    __device__ static C f(C x) {  \
      return expr;                \
    }                             \
  };
TS_CUDA_UNARY(Neg, -x)
TS_CUDA_UNARY(Exp, exp(x))
TS_CUDA_UNARY(Log, log(x))
TS_CUDA_UNARY(Sqrt, sqrt(x))
TS_CUDA_UNARY(Rsqrt, C(1) / sqrt(x))
TS_CUDA_UNARY(Abs, x < C(0) ? C(-x) : x)
TS_CUDA_UNARY(Tanh, tanh(x))
TS_CUDA_UNARY(Sigmoid, C(1) / (C(1) + exp(-x)))
TS_CUDA_UNARY(Relu, x > C(0) ? x : C(0))
TS_CUDA_UNARY(Gelu, C(0.5) * x * (C(1) + erf(x * C(kSqrtHalf))))
TS_CUDA_UNARY(GeluTanh, C(0.5) * x * (C(1) + tanh(C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x))))
#undef TS_CUDA_UNARY

template <class T, class Op>
struct UnaryFn {
  __device__ T operator()(int64_t, T x, T) const { return convert<T>(Op::f(load(x))); }
};

// gelu'(x) = Phi(x) + x * phi(x)
struct GeluGrad {
  template <class C>
  __device__ static C f(C g, C x) {
    return g *
           (C(0.5) * (C(1) + erf(x * C(kSqrtHalf))) + x * C(kInvSqrt2Pi) * exp(C(-0.5) * x * x));
  }
};
// d/dx of 0.5 x (1 + tanh(u)), u = c (x + 0.044715 x^3)
struct GeluTanhGrad {
  template <class C>
  __device__ static C f(C g, C x) {
    const C t = tanh(C(kSqrt2OverPi) * (x + C(0.044715) * x * x * x));
    const C du = C(kSqrt2OverPi) * (C(1) + C(3 * 0.044715) * x * x);
    return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du);
  }
};
template <class T, class Op>
struct BinaryMapFn {
  __device__ T operator()(int64_t, T g, T x) const { return convert<T>(Op::f(load(g), load(x))); }
};

// bias_gelu / bias_gelu_backward (the CPU kernels' contract): z = x + bias rounded to T as
// add gives it, then the GELU (or its gradient, times g) above. One thread per element.
template <class T>
__device__ compute_t<T> biased(const T* x, const T* bias, int64_t width, int64_t k) {
  return load(convert<T>(load(x[k]) + load(bias[k % width])));
}
template <class T, class Op>
__global__ void bias_gelu_kernel(const T* x, const T* bias, int64_t width, T* y, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x)
    y[k] = convert<T>(Op::f(biased(x, bias, width, k)));
}
template <class T, class Op>
__global__ void bias_gelu_grad_kernel(const T* g, const T* x, const T* bias, int64_t width, T* y,
                                      int64_t n) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < n;
       k += int64_t{gridDim.x} * blockDim.x)
    y[k] = convert<T>(Op::f(load(g[k]), biased(x, bias, width, k)));
}
template <class T>
struct BiasGelu {
  static void run(const KernelCall& c) {
    const int64_t n = c.outputs[0].numel();
    if (n == 0) return;
    const T* x = static_cast<const T*>(c.inputs[0].data_ptr());
    const T* bias = static_cast<const T*>(c.inputs[1].data_ptr());
    T* y = static_cast<T*>(c.outputs[0].data_ptr());
    const int64_t width = c.inputs[1].numel();
    const auto launch = c.attrs.flag ? bias_gelu_kernel<T, GeluTanh> : bias_gelu_kernel<T, Gelu>;
    launch<<<grid_for(n), kThreads, 0, stream_of(c.outputs[0])>>>(x, bias, width, y, n);
    TS_CUDA_LAUNCH_CHECK("bias_gelu");
  }
};
template <class T>
struct BiasGeluBackward {
  static void run(const KernelCall& c) {
    const int64_t n = c.outputs[0].numel();
    if (n == 0) return;
    const auto in = [&](int i) { return static_cast<const T*>(c.inputs[i].data_ptr()); };
    const auto launch =
        c.attrs.flag ? bias_gelu_grad_kernel<T, GeluTanhGrad> : bias_gelu_grad_kernel<T, GeluGrad>;
    launch<<<grid_for(n), kThreads, 0, stream_of(c.outputs[0])>>>(
        in(0), in(1), in(2), c.inputs[2].numel(), static_cast<T*>(c.outputs[0].data_ptr()), n);
    TS_CUDA_LAUNCH_CHECK("bias_gelu_backward");
  }
};

template <class Op>
struct Unary {
  template <class T>
  struct K {
    static void run(const KernelCall& c) {
      TensorBase& y = c.outputs[0];
      launch_contiguous(static_cast<T*>(y.data_ptr()),
                        static_cast<const T*>(c.inputs[0].data_ptr()),
                        static_cast<const T*>(nullptr), y.numel(), UnaryFn<T, Op>{}, stream_of(y));
    }
  };
};
template <class Op>
struct GradMap {
  template <class T>
  struct K {
    static void run(const KernelCall& c) {
      TensorBase& y = c.outputs[0];
      launch_contiguous(static_cast<T*>(y.data_ptr()),
                        static_cast<const T*>(c.inputs[0].data_ptr()),
                        static_cast<const T*>(c.inputs[1].data_ptr()), y.numel(),
                        BinaryMapFn<T, Op>{}, stream_of(y));
    }
  };
};

const bool registered = [] {
  register_floating<Unary<Neg>::K>(Kernel::neg);
  register_floating<Unary<Exp>::K>(Kernel::exp);
  register_floating<Unary<Log>::K>(Kernel::log);
  register_floating<Unary<Sqrt>::K>(Kernel::sqrt);
  register_floating<Unary<Rsqrt>::K>(Kernel::rsqrt);
  register_floating<Unary<Abs>::K>(Kernel::abs);
  register_floating<Unary<Tanh>::K>(Kernel::tanh);
  register_floating<Unary<Sigmoid>::K>(Kernel::sigmoid);
  register_floating<Unary<Relu>::K>(Kernel::relu);
  register_floating<Unary<Gelu>::K>(Kernel::gelu);
  register_floating<Unary<GeluTanh>::K>(Kernel::gelu_tanh);
  register_floating<GradMap<GeluGrad>::K>(Kernel::gelu_backward);
  register_floating<GradMap<GeluTanhGrad>::K>(Kernel::gelu_tanh_backward);
  register_floating<BiasGelu>(Kernel::bias_gelu);
  register_floating<BiasGeluBackward>(Kernel::bias_gelu_backward);
  for (DType d : {DType::Int32, DType::Int64}) {
    const bool i32 = d == DType::Int32;
    register_kernel(Kernel::neg, DeviceType::CUDA, d,
                    i32 ? &Unary<Neg>::K<int32_t>::run : &Unary<Neg>::K<int64_t>::run);
    register_kernel(Kernel::abs, DeviceType::CUDA, d,
                    i32 ? &Unary<Abs>::K<int32_t>::run : &Unary<Abs>::K<int64_t>::run);
    register_kernel(Kernel::relu, DeviceType::CUDA, d,
                    i32 ? &Unary<Relu>::K<int32_t>::run : &Unary<Relu>::K<int64_t>::run);
  }
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
