// quantize_blocks: inputs x [segments * n] (contiguous, floating); outputs packed int32
// [segments * words(n)]. dequantize_blocks: inputs packed; outputs y [segments * n].
// attrs: index = block, dims = {segments, bits}. The scheme and layout are
// tessera/quantized_blocks.h: the scale and codes of a block are computed in float (double
// for float64 inputs), one block per task, so results do not depend on the thread count.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu_types.h"
#include "parallel.h"
#include "tessera/quantized_blocks.h"

namespace tessera::cpu {
namespace {

namespace qb = quantized_blocks;

struct Layout {
  int64_t segments, n, block, bits, nb, words;
  explicit Layout(const KernelCall& c, int64_t numel)
      : segments(c.attrs.dims[0]),
        n(numel / segments),
        block(c.attrs.index),
        bits(c.attrs.dims[1]),
        nb(qb::blocks(n, block)),
        words(qb::words(n, block, bits)) {}
  template <class W>  // int32_t or const int32_t
  auto codes(W* packed, int64_t s) const {
    using Byte = std::conditional_t<std::is_const_v<W>, const uint8_t, uint8_t>;
    return reinterpret_cast<Byte*>(packed + s * words);
  }
  template <class W>
  auto scales(W* packed, int64_t s) const {
    using Float = std::conditional_t<std::is_const_v<W>, const float, float>;
    return reinterpret_cast<Float*>(packed + s * words + qb::code_words(n, bits));
  }
};

template <class T>
struct QuantizeBlocks {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const Layout l(c, c.inputs[0].numel());
    const T* x = c.inputs[0].data<T>();
    int32_t* packed = c.outputs[0].data<int32_t>();
    const A range = A((1 << (l.bits - 1)) - 1);  // codes in [-range, range]
    // The padding after the codes travels too: zero it.
    for (int64_t s = 0; s < l.segments; ++s) {
      uint8_t* codes = l.codes(packed, s);
      const int64_t used = qb::code_bytes(l.n, l.bits);
      std::memset(codes + used, 0, static_cast<size_t>(4 * qb::code_words(l.n, l.bits) - used));
    }
    parallel_for(l.segments * l.nb, 4, [&](int64_t b0, int64_t b1) {
      for (int64_t job = b0; job < b1; ++job) {
        const int64_t s = job / l.nb, k = job % l.nb;
        const int64_t first = k * l.block, len = std::min(l.block, l.n - first);
        const T* v = x + s * l.n + first;
        A m = 0;
        for (int64_t i = 0; i < len; ++i) {
          const A a = std::abs(load(v[i]));
          if (!(a <= m)) m = a;  // (a NaN sticks)
        }
        // codes = (x * range) / max: one rounding after an exact product for 16-bit inputs,
        // so a tie is a tie at any precision and rounds to even everywhere.
        A divisor = 1, numerator = range;
        float stored = 1;  // the value of one code step
        if (!std::isfinite(m)) {
          numerator = 0;
          stored = std::numeric_limits<float>::quiet_NaN();  // the values come back NaN
        } else if (m != 0) {
          divisor = m;
          stored = static_cast<float>(m / range);
        } else {
          numerator = 0;
        }
        l.scales(packed, s)[k] = stored;
        uint8_t* codes = l.codes(packed, s);
        for (int64_t i = 0; i < len; ++i) {
          // (ties to even; |q| <= range up to rounding, clamped so it stays there)
          const A q = std::nearbyint(load(v[i]) * numerator / divisor);
          const int code = q == q ? static_cast<int>(std::clamp<A>(q, -range, range)) : 0;
          const int64_t e = first + i;
          if (l.bits == 8) {
            codes[e] = static_cast<uint8_t>(code);
          } else if (e % 2 == 0) {
            codes[e / 2] = static_cast<uint8_t>(code & 0xf);
          } else {
            codes[e / 2] = static_cast<uint8_t>(codes[e / 2] | ((code & 0xf) << 4));
          }
        }
      }
    });
  }
};

template <class T>
struct DequantizeBlocks {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const Layout l(c, c.outputs[0].numel());
    const int32_t* packed = c.inputs[0].data<int32_t>();
    T* y = c.outputs[0].data<T>();
    parallel_for(l.segments * l.nb, 4, [&](int64_t b0, int64_t b1) {
      for (int64_t job = b0; job < b1; ++job) {
        const int64_t s = job / l.nb, k = job % l.nb;
        const int64_t first = k * l.block, len = std::min(l.block, l.n - first);
        const uint8_t* codes = l.codes(packed, s);
        const A scale = A(l.scales(packed, s)[k]);
        T* out = y + s * l.n + first;
        for (int64_t i = 0; i < len; ++i)
          out[i] = store<T>(A(qb::code_at(codes, first + i, l.bits)) * scale);
      }
    });
  }
};

const bool registered = [] {
  register_floating<QuantizeBlocks>(Kernel::quantize_blocks);
  register_floating<DequantizeBlocks>(Kernel::dequantize_blocks);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
