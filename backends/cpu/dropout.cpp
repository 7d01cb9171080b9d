// dropout: y = x * keep / (1 - p) with keep = philox_packed_uniform(seed, offset + i) >= p
// (four elements per Philox draw). Backward is the same kernel applied to the gradient with
// the same (seed, offset), so no mask is stored. inputs: x (contiguous); attrs: scalar = p,
// seed, offset.
#include "cpu_types.h"
#include "parallel.h"
#include "tessera/philox.h"

namespace tessera::cpu {
namespace {

template <class T>
struct Dropout {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const T* x = c.inputs[0].data<T>();
    T* y = c.outputs[0].data<T>();
    const float p = static_cast<float>(c.attrs.scalar);
    // 1 / (1 - p) from the double p, rounded once to the compute type (as PyTorch).
    const A scale = c.attrs.scalar < 1.0 ? A(1.0 / (1.0 - c.attrs.scalar)) : A(0);
    const uint64_t seed = c.attrs.seed, offset = c.attrs.offset;
    parallel_for(c.outputs[0].numel(), 1 << 14, [&](int64_t b, int64_t e) {
      philox::Words r{};
      for (int64_t i = b; i < e; ++i) {
        const uint64_t q = offset + static_cast<uint64_t>(i);
        if (i == b || (q & 3) == 0) r = philox::draw_packed(seed, q);
        const bool keep = philox::packed_uniform(r, q) >= p;
        y[i] = T(keep ? A(load(x[i])) * scale : A(0));
      }
    });
  }
};

const bool registered = [] {
  register_floating<Dropout>(Kernel::dropout);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
