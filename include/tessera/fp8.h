// FP8 as NVIDIA's tensor cores and Transformer Engine use it: E4M3 (4 exponent bits, bias 7,
// 3 mantissa bits, no infinities, largest 448) for forward tensors, E5M2 (5, bias 15, 2
// mantissa bits, largest 57344) for gradients. A value v is stored as the FP8 number nearest
// to v * scale (ties to even, subnormals kept, beyond the largest finite value saturated to it,
// as CUDA's __NV_SATFINITE conversion; NaN stays NaN) and read back as that number / scale.
// The rounding is written once for the host and CUDA kernels (tessera/host_device.h).
#pragma once
#include <cmath>
#include <cstdint>

#include "tessera/host_device.h"

namespace tessera {

enum class Fp8Format : int8_t { E4M3 = 0, E5M2 = 1 };

namespace fp8 {

TS_HOST_DEVICE inline float max_value(Fp8Format f) {
  return f == Fp8Format::E4M3 ? 448.0f : 57344.0f;
}
TS_HOST_DEVICE inline int mantissa_bits(Fp8Format f) {
  return f == Fp8Format::E4M3 ? 3 : 2;
}
// The exponent of the smallest normal number (below it the spacing stays that of this binade).
TS_HOST_DEVICE inline int min_exponent(Fp8Format f) {
  return f == Fp8Format::E4M3 ? -6 : -14;
}

// The FP8 number nearest to v (a float32 value already multiplied by the scale).
TS_HOST_DEVICE inline float round(float v, Fp8Format f) {
  if (v != v) return v;
  const float top = max_value(f);
  const float a = fabsf(v);
  if (a >= top) return copysignf(top, v);
  int e = 0;
  frexpf(a, &e);  // a = m 2^e, m in [0.5, 1): the binade's exponent is e - 1
  const int binade = e - 1 < min_exponent(f) ? min_exponent(f) : e - 1;
  // Spacing 2^(binade - mantissa bits): a division and product by a power of two are exact, so
  // the one rounding is rintf's (to nearest, ties to even on the FP8 number's last bit).
  const float step = ldexpf(1.0f, binade - mantissa_bits(f));
  const float r = rintf(a / step) * step;
  return copysignf(r > top ? top : r, v);
}

}  // namespace fp8
}  // namespace tessera
