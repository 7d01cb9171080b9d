// CPython's random.Random, for what needs Python's random numbers bit for bit: DeepSpeed's
// sparsity layouts draw their random blocks with `random.sample` (nn/sparsity_config.h), so a
// layout equals DeepSpeed's when both generators start from the same seed
// (`random.seed(seed)` in Python). MT19937 seeded as CPython seeds it from an integer
// (init_by_array over the integer's 32-bit words), getrandbits, _randbelow and sample over
// range(n), with CPython 3's choice between its pool and set algorithms. Written here: no
// library reproduces CPython's seeding and sampling (std::mt19937 draws the same numbers but
// seeds another way).
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace tessera::nn {

class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed = 0);
  // random.getrandbits(k), 0 <= k <= 32.
  uint32_t getrandbits(int k);
  // random.randrange(n) for n >= 1 (CPython's _randbelow).
  int64_t randbelow(int64_t n);
  // random.sample(range(n), k), 0 <= k <= n: k distinct values in the order drawn.
  std::vector<int64_t> sample(int64_t n, int64_t k);

 private:
  uint32_t next();  // genrand_uint32
  std::array<uint32_t, 624> state_{};
  size_t index_ = 624;
};

}  // namespace tessera::nn
