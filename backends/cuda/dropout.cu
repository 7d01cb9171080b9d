// dropout: y = x * keep / (1 - p), keep = philox_packed_uniform(seed, offset + i) >= p: the same
// mask as the CPU for the same (seed, offset). One thread per aligned group of four stream
// positions, so one Philox draw serves four elements (with a draw per element the 16-bit
// kernel was compute-bound at 0.45 of copy bandwidth on an H100). Backward reruns it on the
// gradient, storing no mask.
#include "elementwise.cuh"
#include "tessera/philox.h"

namespace tessera::cuda {
namespace {

template <class T, class A>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, float p, A scale, uint64_t seed,
                               uint64_t offset) {
  const uint64_t first = offset & ~uint64_t{3};  // stream position of group 0
  const int64_t groups = static_cast<int64_t>((offset + static_cast<uint64_t>(n) - first + 3) / 4);
  // Whole groups with 4-element-aligned addresses move as one vector.
  const bool packed = (offset & 3) == 0 && reinterpret_cast<uintptr_t>(x) % (4 * sizeof(T)) == 0 &&
                      reinterpret_cast<uintptr_t>(y) % (4 * sizeof(T)) == 0;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < groups;
       g += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t q0 = first + 4 * static_cast<uint64_t>(g);
    const philox::Words r = philox::draw_packed(seed, q0);
    if (packed && 4 * g + 4 <= n) {
      const Pack<T, 4> in = reinterpret_cast<const Pack<T, 4>*>(x)[g];
      Pack<T, 4> out;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const bool keep = philox::packed_uniform(r, q0 + w) >= p;
        out.v[w] = convert<T>(keep ? A(load(in.v[w])) * scale : A(0));
      }
      reinterpret_cast<Pack<T, 4>*>(y)[g] = out;
      continue;
    }
    for (int w = 0; w < 4; ++w) {
      const uint64_t q = q0 + w;
      if (q < offset) continue;
      const int64_t i = static_cast<int64_t>(q - offset);
      if (i >= n) break;
      const bool keep = philox::packed_uniform(r, q) >= p;
      y[i] = convert<T>(keep ? A(load(x[i])) * scale : A(0));
    }
  }
}

template <class T>
struct Dropout {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const float p = static_cast<float>(c.attrs.scalar);
    // 1 / (1 - p) from the double p, rounded once to the compute type (as PyTorch).
    const A scale = c.attrs.scalar < 1.0 ? A(1.0 / (1.0 - c.attrs.scalar)) : A(0);
    TensorBase& y = c.outputs[0];
    const int64_t n = y.numel();
    if (n == 0) return;
    const int64_t groups = (n + 3) / 4 + 1;  // at most one extra for an unaligned offset
    dropout_kernel<T, A><<<std::min(grid_for(groups), 65535u), kThreads, 0, stream_of(y)>>>(
        static_cast<const T*>(c.inputs[0].data_ptr()), static_cast<T*>(y.data_ptr()), n, p, scale,
        c.attrs.seed, c.attrs.offset);
    TS_CUDA_LAUNCH_CHECK("dropout");
  }
};

// bias_dropout_add (the CPU kernel's contract: inputs x, residual[, bias]): y = residual +
// dropout(x + bias), each step rounded to T as the three ops round it. One thread per element (a
// draw per element: the fused pass is bound by its three reads, not by Philox).
__device__ inline float mul_rounded(float a, float b) {
  return __fmul_rn(a, b);
}
__device__ inline double mul_rounded(double a, double b) {
  return __dmul_rn(a, b);
}

template <class T, class A>
__global__ void bias_dropout_add_kernel(const T* x, const T* bias, const T* residual, int64_t width,
                                        T* y, int64_t n, float p, A scale, uint64_t seed,
                                        uint64_t offset) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t q = offset + static_cast<uint64_t>(i);
    const bool keep = philox::packed_uniform(philox::draw_packed(seed, q), q) >= p;
    const T z = bias ? convert<T>(A(load(x[i])) + A(load(bias[i % width]))) : x[i];
    // (the product rounded alone, as the unfused dropout stores it: no FMA with the add)
    const T dropped = convert<T>(keep ? mul_rounded(A(load(z)), scale) : A(0));
    y[i] = convert<T>(A(load(residual[i])) + A(load(dropped)));
  }
}

template <class T>
struct BiasDropoutAdd {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const int64_t n = c.outputs[0].numel();
    if (n == 0) return;
    const A scale = c.attrs.scalar < 1.0 ? A(1.0 / (1.0 - c.attrs.scalar)) : A(0);
    const auto in = [&](int i) { return static_cast<const T*>(c.inputs[i].data_ptr()); };
    const bool with_bias = c.inputs.size() > 2;
    bias_dropout_add_kernel<T, A><<<grid_for(n), kThreads, 0, stream_of(c.outputs[0])>>>(
        in(0), with_bias ? in(2) : nullptr, in(1), with_bias ? c.inputs[2].numel() : 1,
        static_cast<T*>(c.outputs[0].data_ptr()), n, static_cast<float>(c.attrs.scalar), scale,
        c.attrs.seed, c.attrs.offset);
    TS_CUDA_LAUNCH_CHECK("bias_dropout_add");
  }
};

const bool registered = [] {
  register_floating<Dropout>(Kernel::dropout);
  register_floating<BiasDropoutAdd>(Kernel::bias_dropout_add);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
