// Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) and
// the uniform/normal transforms, in one header compiled for both the host and CUDA devices,
// so the same (seed, index) gives the same number on every backend. Public so that a user's
// kernel can draw the numbers Tessera's random ops draw.
#pragma once
#include <math.h>

#include <cstdint>

#include "tessera/host_device.h"

namespace tessera::philox {

struct Words {
  uint32_t w[4];
};

TS_HOST_DEVICE inline Words rounds10(Words c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c.w[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c.w[2];
    c = {{static_cast<uint32_t>(p1 >> 32) ^ c.w[1] ^ k0, static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c.w[3] ^ k1, static_cast<uint32_t>(p0)}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

TS_HOST_DEVICE inline Words draw(uint64_t seed, uint64_t index) {
  return rounds10({{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0}},
                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Dropout's stream packs four numbers in one draw (the draw is the costly part): index q
// takes word q % 4 of draw q / 4, counted in a separate counter space (third counter word 1)
// so these draws never repeat the one-number-per-index streams' draws.
TS_HOST_DEVICE inline Words draw_packed(uint64_t seed, uint64_t q) {
  const uint64_t group = q >> 2;
  return rounds10({{static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), 1u, 0}},
                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}
// Uniform in [0, 1) for index q from its packed draw `r` (draw_packed(seed, q)).
TS_HOST_DEVICE inline float packed_uniform(const Words& r, uint64_t q) {
  return static_cast<float>(r.w[q & 3] >> 8) * (1.0f / 16777216.0f);
}

// Uniform in [0, 1) from the top 24 bits of the first word.
TS_HOST_DEVICE inline float uniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(draw(seed, index).w[0] >> 8) * (1.0f / 16777216.0f);
}

TS_HOST_DEVICE inline double uniform_f64(uint64_t seed, uint64_t index) {
  const Words r = draw(seed, index);
  const uint64_t bits = (static_cast<uint64_t>(r.w[0]) << 21) ^ (r.w[1] >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// Box-Muller on two 32-bit words; u1 in (0, 1] so the log is finite.
TS_HOST_DEVICE inline double normal_f64(uint64_t seed, uint64_t index) {
  const Words r = draw(seed, index);
  const double u1 = (static_cast<double>(r.w[0]) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(r.w[1]) / 4294967296.0;
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586476925286766559 * u2);
}

}  // namespace tessera::philox
