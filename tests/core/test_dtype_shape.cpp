#include <doctest/doctest.h>

#include "tessera/tessera.h"

using namespace tessera;

TEST_CASE("type promotion follows PyTorch's rules") {
  CHECK(promote_types(DType::Bool, DType::Int32) == DType::Int32);
  CHECK(promote_types(DType::Int32, DType::Int64) == DType::Int64);
  CHECK(promote_types(DType::Int64, DType::Float16) == DType::Float16);
  CHECK(promote_types(DType::Float16, DType::BFloat16) == DType::Float32);
  CHECK(promote_types(DType::BFloat16, DType::Float32) == DType::Float32);
  CHECK(promote_types(DType::Float32, DType::Float64) == DType::Float64);
  // A 0-dim float does not widen a tensor's dtype; a float tensor beats an int one.
  CHECK((ones({2}, DType::BFloat16) * 3.0).dtype() == DType::BFloat16);
  CHECK((ones({2}, DType::Int64) + ones({2}, DType::Float16)).dtype() == DType::Float16);
}

TEST_CASE("itemsize and names") {
  CHECK(itemsize(DType::Bool) == 1);
  CHECK(itemsize(DType::BFloat16) == 2);
  CHECK(itemsize(DType::Float64) == 8);
  CHECK(dtype_from_name("bf16") == DType::BFloat16);
  CHECK_THROWS_WITH_AS(dtype_from_name("float8"), doctest::Contains("unknown dtype 'float8'"),
                       Error);
}

TEST_CASE("16-bit floats round to nearest even (IEEE 754 bit patterns)") {
  CHECK(float_to_half_bits(1.0f) == 0x3C00);
  CHECK(float_to_half_bits(65504.0f) == 0x7BFF);
  CHECK(float_to_half_bits(-2.0f) == 0xC000);
  CHECK(half_bits_to_float(0x3555) == doctest::Approx(0.333251953125));
  CHECK(float_to_bf16_bits(1.0f) == 0x3F80);
  CHECK(float_to_bf16_bits(1.0f + 1.0f / 256) == 0x3F80);  // tie -> even (down)
  CHECK(float_to_bf16_bits(1.0f + 3.0f / 256) == 0x3F82);  // tie -> even (up)
  CHECK(bf16_bits_to_float(0x4049) == doctest::Approx(3.140625));
}

TEST_CASE("broadcasting follows NumPy and names both shapes when it cannot") {
  CHECK(broadcast_shapes({3, 1, 4}, {5, 1}, "op") == Shape{3, 5, 4});
  CHECK(broadcast_shapes({}, {2, 3}, "op") == Shape{2, 3});
  CHECK_THROWS_WITH_AS(broadcast_shapes({2, 3}, {4, 3}, "add"),
                       doctest::Contains("add: shapes [2, 3] and [4, 3] cannot be broadcast"),
                       Error);
  CHECK_THROWS_WITH_AS(ones({2, 3}) + ones({3, 2}), doctest::Contains("[2, 3] and [3, 2]"), Error);
}

TEST_CASE("devices parse and print") {
  CHECK(Device::parse("cuda:1") == Device::cuda(1));
  CHECK(Device::parse("cpu").str() == "cpu");
  CHECK_THROWS_AS(Device::parse("gpu"), Error);
  CHECK_THROWS_AS(Device::parse("cuda:x"), Error);
}

TEST_CASE("casts between all dtypes") {
  const Tensor x = from_vector({-1.5, 0.0, 2.25, 300.0}, {4}, DType::Float64);
  CHECK(x.to(DType::Int32).to_vector() == std::vector<double>{-1, 0, 2, 300});
  CHECK(x.to(DType::Bool).to_vector() == std::vector<double>{1, 0, 1, 1});
  CHECK(x.to(DType::Float16).to_vector() == std::vector<double>{-1.5, 0, 2.25, 300});
  CHECK(x.to(DType::BFloat16).to_vector() == std::vector<double>{-1.5, 0, 2.25, 300});
  CHECK(x.to(DType::Float16).to(DType::BFloat16).to(DType::Int64).to_vector() ==
        std::vector<double>{-1, 0, 2, 300});
}
