#include "tessera/nn/python_random.h"

#include <bit>
#include <cmath>
#include <unordered_set>

#include "tessera/error.h"

namespace tessera::nn {

namespace {
constexpr size_t kN = 624, kM = 397;
}  // namespace

// CPython's random_seed(int): the integer's absolute value as little-endian 32-bit words (one
// word for 0), through MT19937's init_by_array.
PythonRandom::PythonRandom(uint64_t seed) {
  std::vector<uint32_t> key{static_cast<uint32_t>(seed)};
  if (seed >> 32) key.push_back(static_cast<uint32_t>(seed >> 32));
  state_[0] = 19650218u;  // init_genrand(19650218)
  for (size_t i = 1; i < kN; ++i)
    state_[i] = 1812433253u * (state_[i - 1] ^ (state_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  size_t i = 1, j = 0;
  for (size_t k = std::max(kN, key.size()); k > 0; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1664525u)) + key[j] +
                static_cast<uint32_t>(j);
    if (++i >= kN) state_[0] = state_[kN - 1], i = 1;
    if (++j >= key.size()) j = 0;
  }
  for (size_t k = kN - 1; k > 0; --k) {
    state_[i] = (state_[i] ^ ((state_[i - 1] ^ (state_[i - 1] >> 30)) * 1566083941u)) -
                static_cast<uint32_t>(i);
    if (++i >= kN) state_[0] = state_[kN - 1], i = 1;
  }
  state_[0] = 0x80000000u;
  index_ = kN;
}

uint32_t PythonRandom::next() {
  if (index_ >= kN) {
    auto twist = [this](size_t a, size_t b, size_t c) {
      const uint32_t y = (state_[a] & 0x80000000u) | (state_[b] & 0x7fffffffu);
      state_[a] = state_[c] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    };
    size_t k = 0;
    for (; k < kN - kM; ++k) twist(k, k + 1, k + kM);
    for (; k < kN - 1; ++k) twist(k, k + 1, k + kM - kN);
    twist(kN - 1, 0, kM - 1);
    index_ = 0;
  }
  uint32_t y = state_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint32_t PythonRandom::getrandbits(int k) {
  TS_CHECK(k >= 0 && k <= 32, "PythonRandom::getrandbits: k = ", k, " is not in [0, 32]");
  return k == 0 ? 0u : next() >> (32 - k);
}

int64_t PythonRandom::randbelow(int64_t n) {
  TS_CHECK(n >= 1 && n <= (int64_t{1} << 32), "PythonRandom::randbelow: n = ", n,
           " is not in [1, 2^32]");
  const int bits = std::bit_width(static_cast<uint64_t>(n));  // n.bit_length()
  int64_t r = getrandbits(bits);
  while (r >= n) r = getrandbits(bits);
  return r;
}

std::vector<int64_t> PythonRandom::sample(int64_t n, int64_t k) {
  TS_CHECK(k >= 0 && k <= n, "PythonRandom::sample: a sample of ", k, " from range(", n,
           ") (sample larger than population or negative)");
  std::vector<int64_t> out(static_cast<size_t>(k));
  // CPython: a pool list when it is smaller than the set the other way would build.
  int64_t setsize = 21;
  if (k > 5)
    setsize += static_cast<int64_t>(
        std::pow(4.0, std::ceil(std::log(static_cast<double>(k * 3)) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<int64_t> pool(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pool[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = randbelow(n - i);
      out[static_cast<size_t>(i)] = pool[static_cast<size_t>(j)];
      pool[static_cast<size_t>(j)] = pool[static_cast<size_t>(n - i - 1)];
    }
    return out;
  }
  std::unordered_set<int64_t> selected;
  for (int64_t i = 0; i < k; ++i) {
    int64_t j = randbelow(n);
    while (selected.count(j)) j = randbelow(n);
    selected.insert(j);
    out[static_cast<size_t>(i)] = j;
  }
  return out;
}

}  // namespace tessera::nn
