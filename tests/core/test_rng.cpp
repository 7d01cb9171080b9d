#include <doctest/doctest.h>

#include <cmath>

#include "tessera/tessera.h"

using namespace tessera;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors") {
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("same seed, same numbers; draws advance the offset") {
  Generator g1(42), g2(42);
  const Tensor a = randn({100}, DType::Float32, Device::cpu(), &g1);
  const Tensor b = randn({100}, DType::Float32, Device::cpu(), &g2);
  CHECK(a.to_vector() == b.to_vector());
  CHECK(g1.state().offset == 100);
  const Tensor c = randn({100}, DType::Float32, Device::cpu(), &g1);
  CHECK(c.to_vector() != a.to_vector());
  g2.set_state({42, 0});
  CHECK(randn({100}, DType::Float32, Device::cpu(), &g2).to_vector() == a.to_vector());
}

TEST_CASE("element i depends only on (seed, offset + i)") {
  Generator g(9);
  const auto whole = rand({10}, DType::Float32, Device::cpu(), &g).to_vector();
  Generator h(9);
  h.set_state({9, 4});
  const auto tail = rand({6}, DType::Float32, Device::cpu(), &h).to_vector();
  for (int i = 0; i < 6; ++i) CHECK(tail[i] == whole[i + 4]);
}

TEST_CASE("uniform and normal have the right moments") {
  Generator g(1);
  const Tensor u = rand({200000}, DType::Float64, Device::cpu(), &g);
  CHECK(std::fabs(mean(u).item() - 0.5) < 0.005);
  CHECK(amin(u).item() >= 0.0);
  CHECK(amax(u).item() < 1.0);
  const Tensor n = randn({200000}, DType::Float64, Device::cpu(), &g);
  CHECK(std::fabs(mean(n).item()) < 0.01);
  CHECK(std::fabs(var(n).item() - 1.0) < 0.01);
}

TEST_CASE("manual_seed resets the default generator") {
  manual_seed(123);
  const auto a = randn({8}).to_vector();
  manual_seed(123);
  CHECK(randn({8}).to_vector() == a);
}

TEST_CASE("dropout's stream: word q % 4 of Philox draw q / 4 in counter space 1") {
  const uint64_t seed = 0x123456789abcdefull;
  Generator gen(seed);
  gen.reserve(3);  // an offset that is not a multiple of 4
  const double p = 0.3;
  const int64_t n = 1001;
  const auto y = dropout(ones({n}), p, true, &gen).to_vector();
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t q = 3 + static_cast<uint64_t>(i), group = q / 4;
    const auto words =
        philox4x32_10({static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), 1, 0},
                      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
    const float u = static_cast<float>(words[q % 4] >> 8) / 16777216.0f;
    CHECK(u == philox_packed_uniform(seed, q));
    const double want = u >= p ? 1.0 / (1.0 - p) : 0.0;
    CHECK(std::fabs(y[i] - want) < 1e-6);
    dropped += y[i] == 0.0;
  }
  CHECK(std::fabs(dropped / static_cast<double>(n) - p) < 0.05);
  // Its own counter space: the packed numbers are not the per-element streams' numbers.
  int64_t same = 0;
  for (uint64_t k = 0; k < 1000; ++k)
    same += philox_packed_uniform(seed, 4 * k) == philox_uniform(seed, k);
  CHECK(same == 0);
}

TEST_CASE("dropout under data and sequence shards applies one process's mask, chunk by chunk") {
  // Global batch of 4 rows, 6 positions, 3 features; 2 data-parallel ranks (2 rows each) x 3
  // sequence ranks (2 positions each). Each (data, sequence) rank's dropout of its block must
  // be the block of one process's dropout of the whole, and leave the generator where it does.
  const Tensor x = arange(1, 73, 1, DType::Float32).view({4, 6, 3});
  Generator whole_gen(77);
  whole_gen.reserve(5);
  const Tensor whole = dropout(x, 0.4, true, &whole_gen);
  for (int d = 0; d < 2; ++d)
    for (int s = 0; s < 3; ++s) {
      CAPTURE(d);
      CAPTURE(s);
      Generator gen(77);
      gen.reserve(5);
      set_data_parallel_shard(d, 2);
      Tensor got;
      {
        SequenceShardGuard guard(s, 3);
        got = dropout(x.narrow(0, 2 * d, 2).narrow(1, 2 * s, 2), 0.4, true, &gen);
      }
      set_data_parallel_shard(0, 1);
      CHECK(got.to_vector() ==
            whole.narrow(0, 2 * d, 2).narrow(1, 2 * s, 2).contiguous().to_vector());
      CHECK(gen.state().offset == whole_gen.state().offset);
    }
  CHECK(sequence_shard().world == 1);  // the guard restored it
  CHECK_THROWS_WITH_AS(SequenceShardGuard(3, 3), doctest::Contains("sequence shard: rank 3 of 3"),
                       Error);
}
