#include "tessera/rng.h"

#include <cmath>

namespace tessera {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  // Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11), 10 rounds.
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

namespace {
std::array<uint32_t, 4> draw(uint64_t seed, uint64_t index) {
  return philox4x32_10({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), 0, 0},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}
constexpr double kTwoPi = 6.283185307179586476925286766559;
}  // namespace

float philox_uniform(uint64_t seed, uint64_t index) {
  return static_cast<float>(draw(seed, index)[0] >> 8) * (1.0f / 16777216.0f);
}

double philox_uniform_f64(uint64_t seed, uint64_t index) {
  const auto r = draw(seed, index);
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

float philox_normal(uint64_t seed, uint64_t index) {
  return static_cast<float>(philox_normal_f64(seed, index));
}

double philox_normal_f64(uint64_t seed, uint64_t index) {
  // Box-Muller on two 32-bit words; u1 in (0, 1] so the log is finite.
  const auto r = draw(seed, index);
  const double u1 = (static_cast<double>(r[0]) + 1.0) / 4294967296.0;
  const double u2 = static_cast<double>(r[1]) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = {seed, 0};
}

GeneratorState Generator::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

void Generator::set_state(GeneratorState state) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = state;
}

GeneratorState Generator::reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  const GeneratorState s = state_;
  state_.offset += n;
  return s;
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace tessera
