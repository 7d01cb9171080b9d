// fp8_cast on the GPU: the CPU kernel's contract (backends/cpu/fp8_cast.cpp) and rounding
// (tessera/fp8.h). Each block reduces max |x| over its elements and raises amax with an
// integer atomicMax on the float's bits (non-negative floats order as their bits do, and a NaN
// orders above infinity, so it sticks as on the CPU); a maximum has no summation order.
#include "kernel_util.cuh"
#include "tessera/fp8.h"

namespace tessera::cuda {
namespace {

struct MaxKeepNaN {
  __device__ float operator()(float a, float b) const { return a != a || a > b ? a : b; }
};

template <class T>
__global__ void fp8_cast_kernel(const T* x, T* out, float* amax, int64_t n, float scale,
                                Fp8Format format) {
  float m = 0.0f;
  const int64_t stride = int64_t{gridDim.x} * kThreads;
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < n; i += stride) {
    const auto v = static_cast<float>(load(x[i]));
    m = MaxKeepNaN{}(fabsf(v), m);
    out[i] = convert<T>(fp8::round(v * scale, format));
  }
  if (amax == nullptr) return;  // (uniform over the block: no thread skips the reduction alone)
  m = block_reduce<kThreads>(m, MaxKeepNaN{});
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
}

template <class T>
struct Fp8Cast {
  static void run(const KernelCall& c) {
    const int64_t n = c.inputs[0].numel();
    if (n == 0) return;
    const unsigned grid = grid_for(n, 8);
    fp8_cast_kernel<T><<<grid, kThreads, 0, stream_of(c.outputs[0])>>>(
        static_cast<const T*>(c.inputs[0].data_ptr()), static_cast<T*>(c.outputs[0].data_ptr()),
        c.outputs.size() > 1 ? c.outputs[1].data<float>() : nullptr, n,
        static_cast<float>(c.attrs.scalar), static_cast<Fp8Format>(c.attrs.index));
    TS_CUDA_LAUNCH_CHECK("fp8_cast");
  }
};

const bool registered = [] {
  register_floating<Fp8Cast>(Kernel::fp8_cast);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
