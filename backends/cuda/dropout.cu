// dropout: y = x * keep / (1 - p), keep = philox_uniform(seed, offset + i) >= p: the same mask
// as the CPU for the same (seed, offset). Backward reruns it on the gradient, storing no mask.
#include "backends/cuda/elementwise.cuh"
#include "core/philox.h"

namespace tessera::cuda {
namespace {

template <class T>
struct DropoutFn {
  float p;
  compute_t<T> scale;
  uint64_t seed, offset;
  __device__ T operator()(int64_t i, T x, T) const {
    const bool keep = philox::uniform(seed, offset + static_cast<uint64_t>(i)) >= p;
    return convert<T>(keep ? compute_t<T>(load(x)) * scale : compute_t<T>(0));
  }
};

template <class T>
struct Dropout {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const float p = static_cast<float>(c.attrs.scalar);
    const A scale = p < 1.0f ? A(1) / (A(1) - A(p)) : A(0);
    Tensor& y = c.outputs[0];
    launch_contiguous(static_cast<T*>(y.data_ptr()), static_cast<const T*>(c.inputs[0].data_ptr()),
                      static_cast<const T*>(nullptr), y.numel(),
                      DropoutFn<T>{p, scale, c.attrs.seed, c.attrs.offset}, stream_of(y));
  }
};

const bool registered = [] {
  register_floating<Dropout>(Kernel::dropout);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
