// fp8_cast: inputs x (contiguous, floating); outputs the FP8 numbers of x * scale, in x's
// dtype (every FP8 number is exact in float16, bfloat16 and wider), and, when there is a second
// output, amax (float32 [1]) raised to max |x| over the call (a running maximum over a step's
// calls; a NaN sticks).
// attrs: scalar = scale, index = Fp8Format. Rounding: tessera/fp8.h, on the float32 product as
// the GPU computes it. The maximum does not depend on how the elements split over threads.
#include <algorithm>
#include <vector>

#include "cpu_types.h"
#include "parallel.h"
#include "tessera/fp8.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kChunk = 1 << 14;

// max that keeps a NaN.
inline float max_keep_nan(float a, float b) {
  return a != a || a > b ? a : b;
}

template <class T>
struct Fp8Cast {
  static void run(const KernelCall& c) {
    const int64_t n = c.inputs[0].numel();
    const T* x = c.inputs[0].data<T>();
    T* out = c.outputs[0].data<T>();
    float* amax = c.outputs.size() > 1 ? c.outputs[1].data<float>() : nullptr;
    const auto scale = static_cast<float>(c.attrs.scalar);
    const auto format = static_cast<Fp8Format>(c.attrs.index);
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<float> partial(static_cast<size_t>(chunks), 0.0f);
    parallel_for(chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t k = c0; k < c1; ++k) {
        float m = 0.0f;
        for (int64_t i = k * kChunk, end = std::min(n, (k + 1) * kChunk); i < end; ++i) {
          const auto v = static_cast<float>(load(x[i]));
          m = max_keep_nan(std::abs(v), m);
          out[i] = store<T>(static_cast<compute_t<T>>(fp8::round(v * scale, format)));
        }
        partial[static_cast<size_t>(k)] = m;
      }
    });
    if (amax)
      for (const float m : partial) *amax = max_keep_nan(m, *amax);
  }
};

const bool registered = [] {
  register_floating<Fp8Cast>(Kernel::fp8_cast);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
