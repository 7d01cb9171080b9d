// Block quantization (ZeRO++): packed bytes derived by hand, and random data against a
// separate transcription of the scheme (tessera/quantized_blocks.h: per block, in float,
// scale = max|x| / r with r = 2^(bits-1) - 1, codes round-half-even((x * r) / max|x|)).
#include <doctest/doctest.h>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tessera/quantized_blocks.h"
#include "tessera/tessera.h"

using namespace tessera;
namespace qb = tessera::quantized_blocks;

namespace {

// float32 values (exact through double).
Tensor f32(const std::vector<float>& v) {
  return from_vector(std::vector<double>(v.begin(), v.end()), {static_cast<int64_t>(v.size())});
}

std::vector<uint8_t> bytes_of(const Tensor& packed) {
  std::vector<uint8_t> out(static_cast<size_t>(packed.numel()) * 4);
  std::memcpy(out.data(), packed.data<int32_t>(), out.size());
  return out;
}

float scale_at(const Tensor& packed, int64_t word) {
  float s;
  std::memcpy(&s, packed.data<int32_t>() + word, 4);
  return s;
}

Tensor roundtrip(const Tensor& x, int64_t segments, int64_t block, int64_t bits) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dequantize_blocks_into(out, quantize_blocks(x, segments, block, bits), segments, block, bits);
  return out;
}

// The transcription: one segment's codes and stored scales, float arithmetic as DeepSpeed's.
void reference(const std::vector<float>& x, int64_t block, int bits, std::vector<int>& codes,
               std::vector<float>& scales) {
  const int n = static_cast<int>(x.size());
  codes.assign(x.size(), 0);
  scales.clear();
  for (int first = 0; first < n; first += static_cast<int>(block)) {
    const int last = std::min(n, first + static_cast<int>(block));
    float m = 0;
    for (int i = first; i < last; ++i) m = std::max(m, std::fabs(x[i]));
    const float r = float((1 << (bits - 1)) - 1);
    scales.push_back(m == 0 ? 1.0f : m / r);
    for (int i = first; i < last; ++i)
      codes[i] = m == 0 ? 0 : static_cast<int>(std::clamp(std::nearbyint(x[i] * r / m), -r, r));
  }
}

}  // namespace

TEST_CASE("quantize_blocks: 8-bit codes and scale of one block, by hand") {
  const Tensor x = f32({1, -0.5, 0.25, 2, 0, -2, 1.5, 0.0078125});
  const Tensor packed = quantize_blocks(x, 1, 8, 8);
  REQUIRE(packed.numel() == 3);  // 8 code bytes, one scale
  // max 2: 63.5 codes per unit; 63.5 rounds to 64 (ties to even), -31.75 to -32, 15.875 to
  // 16, 2 and -2 to +-127 exactly, 95.25 to 95, 0.496 to 0.
  const auto got = bytes_of(packed);
  CHECK(std::vector<uint8_t>(got.begin(), got.begin() + 8) ==
        std::vector<uint8_t>{64, 0xe0, 16, 127, 0, 0x81, 95, 0});
  const float step = 2.0f / 127;
  CHECK(scale_at(packed, 2) == step);
  std::vector<double> want;
  for (const int code : {64, -32, 16, 127, 0, -127, 95, 0}) want.push_back(float(code) * step);
  CHECK(roundtrip(x, 1, 8, 8).to_vector() == want);
  CHECK(want[3] == 2.0);  // the block's largest value comes back exactly
}

TEST_CASE("quantize_blocks: 4-bit codes two per byte, lower nibble first, by hand") {
  const Tensor x = f32({1, -0.5, 0.25, 2, 0, -2, 1.5, 0.0078125});
  const Tensor packed = quantize_blocks(x, 1, 8, 4);
  REQUIRE(packed.numel() == 2);  // 4 code bytes, one scale
  // max 2: 3.5 codes per unit; codes 4 (3.5, ties to even), -2, 1, 7, 0, -7, 5, 0.
  const auto got = bytes_of(packed);
  CHECK(std::vector<uint8_t>(got.begin(), got.begin() + 4) ==
        std::vector<uint8_t>{0xe4, 0x71, 0x90, 0x05});
  const float step = 2.0f / 7;
  CHECK(scale_at(packed, 1) == step);
  std::vector<double> want;
  for (const int code : {4, -2, 1, 7, 0, -7, 5, 0}) want.push_back(float(code) * step);
  CHECK(roundtrip(x, 1, 8, 4).to_vector() == want);
}

TEST_CASE("quantize_blocks: random segments equal a transcription of the scheme") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t segments = 3, n = 1001;  // blocks of 64 with a short last one, an odd tail
  std::vector<float> values(static_cast<size_t>(segments * n));
  for (auto& v : values) v = normal(rng) * 0.02f;
  for (int i = 64; i < 128; ++i) values[i] = 0;  // a block of zeros: scale 1, codes 0
  const Tensor x = f32(values);
  for (const int bits : {8, 4}) {
    CAPTURE(bits);
    const Tensor packed = quantize_blocks(x, segments, 64, bits);
    REQUIRE(packed.numel() == segments * qb::words(n, 64, bits));
    const auto bytes = bytes_of(packed);
    const std::vector<double> back = roundtrip(x, segments, 64, bits).to_vector();
    int64_t wrong = 0;
    double worst = 0;  // |back - x| / the block's scale
    for (int64_t s = 0; s < segments; ++s) {
      std::vector<float> seg(values.begin() + s * n, values.begin() + (s + 1) * n);
      std::vector<int> codes;
      std::vector<float> scales;
      reference(seg, 64, bits, codes, scales);
      const int64_t base = s * qb::words(n, 64, bits) * 4;
      for (int64_t i = 0; i < n; ++i) {
        const uint8_t b = bytes[base + (bits == 8 ? i : i / 2)];
        int code = bits == 8 ? static_cast<int8_t>(b) : (b >> (4 * (i % 2))) & 0xf;
        if (bits == 4 && code >= 8) code -= 16;
        wrong += code != codes[i];
        const float scale = scales[i / 64];
        worst = std::max(worst, std::fabs(back[s * n + i] - seg[i]) / scale);
        wrong += back[s * n + i] != static_cast<double>(static_cast<float>(codes[i]) * scale);
      }
      for (size_t k = 0; k < scales.size(); ++k)
        wrong += scale_at(packed, s * qb::words(n, 64, bits) + qb::code_words(n, bits) +
                                      static_cast<int64_t>(k)) != scales[k];
      // The padding after the codes is zero (it travels).
      for (int64_t b = qb::code_bytes(n, bits); b < 4 * qb::code_words(n, bits); ++b)
        wrong += bytes[base + b] != 0;
    }
    CHECK(wrong == 0);
    CHECK(worst <= 0.5 + 1e-5);  // half a step
  }
}

TEST_CASE("quantize_blocks: bf16 input, non-finite blocks, thread counts") {
  std::vector<float> values(96);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.3f * float(i));
  const Tensor x = f32(values);
  // bf16: the codes of the bf16 values.
  const Tensor xb = x.to(DType::BFloat16);
  CHECK(bytes_of(quantize_blocks(xb, 1, 32, 8)) ==
        bytes_of(quantize_blocks(xb.to(DType::Float32), 1, 32, 8)));
  // A NaN or infinity comes back NaN in its block only.
  values[40] = std::numeric_limits<float>::infinity();
  const std::vector<double> back = roundtrip(f32(values), 1, 32, 8).to_vector();
  for (int i = 0; i < 96; ++i) CHECK((i / 32 == 1) == std::isnan(back[i]));
  // One block per task: any thread count gives the same bytes.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = bytes_of(quantize_blocks(x, 2, 8, 4));
  omp_set_num_threads(3);
  const auto three = bytes_of(quantize_blocks(x, 2, 8, 4));
  omp_set_num_threads(threads);
  CHECK(one == three);
}

TEST_CASE("quantize_blocks: bad arguments are errors naming them") {
  const Tensor x = zeros({24});
  CHECK_THROWS_WITH_AS(quantize_blocks(x, 1, 8, 3), doctest::Contains("bits must be 4 or 8, got 3"),
                       Error);
  CHECK_THROWS_WITH_AS(quantize_blocks(x, 1, 12, 8), doctest::Contains("multiple of 8"), Error);
  CHECK_THROWS_WITH_AS(quantize_blocks(x, 5, 8, 8),
                       doctest::Contains("24 elements do not split into 5 equal segments"), Error);
  CHECK_THROWS_WITH_AS(quantize_blocks(zeros({4}, DType::Int64), 1, 8, 8),
                       doctest::Contains("quantize_blocks"), Error);
  Tensor out = Tensor::empty({24});
  const Tensor packed = quantize_blocks(x, 1, 8, 8);
  CHECK_THROWS_WITH_AS(dequantize_blocks_into(out, packed, 2, 8, 8),
                       doctest::Contains("pack into 10 words"), Error);
  CHECK_THROWS_WITH_AS(dequantize_blocks_into(out, packed.to(DType::Float32), 1, 8, 8),
                       doctest::Contains("contiguous int32"), Error);
}
