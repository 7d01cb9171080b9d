// Views share storage and address elements by strides; expected values come from
// row-major index arithmetic written out in the test.
#include <doctest/doctest.h>

#include "tessera/tessera.h"

using namespace tessera;

namespace {
Tensor iota(const Shape& s) {
  return arange(0, static_cast<double>(numel_of(s)), 1, DType::Float32).view(s);
}
}  // namespace

TEST_CASE("view and reshape share storage; writes show through") {
  Tensor x = iota({2, 6});
  Tensor v = x.view({3, 4});
  CHECK(v.storage() == x.storage());
  v.select(0, 1).fill_(-1);  // row 1 of [3,4] = flat 4..7
  const auto e = x.to_vector();
  for (int i = 0; i < 12; ++i) CHECK(e[i] == ((i >= 4 && i < 8) ? -1.0 : i));
  CHECK(x.version() == v.version());
}

TEST_CASE("transpose and permute swap strides without copying") {
  const Tensor x = iota({2, 3, 4});
  const Tensor p = x.permute({2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK_FALSE(p.is_contiguous());
  const auto v = p.contiguous().to_vector();
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) CHECK(v[a * 6 + b * 3 + c] == b * 12 + c * 4 + a);
  CHECK(x.transpose(0, 2).shape() == Shape{4, 3, 2});
}

TEST_CASE("narrow, slice and select offset into the same storage") {
  const Tensor x = iota({4, 5});
  const Tensor n = x.narrow(1, 2, 3);
  CHECK(n.offset() == 2);
  CHECK(n.contiguous().to_vector() ==
        std::vector<double>{2, 3, 4, 7, 8, 9, 12, 13, 14, 17, 18, 19});
  CHECK(x.slice(0, 1, 4, 2).contiguous().to_vector() ==
        std::vector<double>{5, 6, 7, 8, 9, 15, 16, 17, 18, 19});
  CHECK(x.select(1, -1).to_vector() == std::vector<double>{4, 9, 14, 19});
  CHECK_THROWS_WITH_AS(x.narrow(0, 3, 2), doctest::Contains("out of bounds"), Error);
}

TEST_CASE("expand uses stride 0; squeeze and unsqueeze") {
  const Tensor x = iota({3, 1});
  const Tensor e = x.expand({2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(e.contiguous().to_vector()[4 * 2 + 3] == 2.0);
  CHECK(x.squeeze(1).shape() == Shape{3});
  CHECK(x.unsqueeze(0).shape() == Shape{1, 3, 1});
  CHECK(iota({1, 3, 1}).squeeze().shape() == Shape{3});
  CHECK_THROWS_WITH_AS(x.expand({3, 2, 2}), doctest::Contains("cannot expand"), Error);
}

TEST_CASE("view of a non-contiguous tensor is refused; reshape copies") {
  const Tensor t = iota({3, 4}).t();
  CHECK_THROWS_WITH_AS(t.view({12}), doctest::Contains("use reshape()"), Error);
  const Tensor r = t.reshape({12});
  CHECK(r.storage() != t.storage());
  CHECK(r.to_vector()[1] == 4.0);
  // Splitting a dim of a non-contiguous tensor is still a view.
  const Tensor n = iota({4, 6}).narrow(1, 0, 4);  // strides [6, 1]
  const Tensor v = n.view({4, 2, 2});
  CHECK(v.storage() == n.storage());
  CHECK(v.strides() == Shape{6, 2, 1});
  CHECK(v.select(0, 2).contiguous().to_vector() == std::vector<double>{12, 13, 14, 15});
  CHECK(iota({2, 6}).view({-1, 3}).shape() == Shape{4, 3});
}

TEST_CASE("cat, stack and split") {
  const Tensor a = iota({2, 2}), b = iota({2, 1});
  CHECK(cat({a, b}, 1).to_vector() == std::vector<double>{0, 1, 0, 2, 3, 1});
  CHECK(stack({a, a}, 0).shape() == Shape{2, 2, 2});
  const auto parts = split(iota({5}), 2);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].to_vector() == std::vector<double>{4});
  CHECK(chunk(iota({6}), 3)[1].to_vector() == std::vector<double>{2, 3});
  CHECK_THROWS_WITH_AS(cat({a, iota({3, 1})}, 1), doctest::Contains("sizes must match"), Error);
}

TEST_CASE("in-place ops bump the version counter shared by views") {
  Tensor x = zeros({4});
  const Tensor v = x.narrow(0, 1, 2);
  const uint64_t before = x.version();
  v.detach().fill_(3);
  x.add_(ones({4}));
  CHECK(x.version() == before + 2);
  CHECK(x.to_vector() == std::vector<double>{1, 4, 4, 1});
}

TEST_CASE("creation ops") {
  CHECK(arange(0, 5, 2).to_vector() == std::vector<double>{0, 2, 4});
  CHECK(arange(1, 2, 0.25, DType::Float32).to_vector() == std::vector<double>{1, 1.25, 1.5, 1.75});
  CHECK(full({2}, 7, DType::Int32).to_vector() == std::vector<double>{7, 7});
  CHECK(ones({2, 2}).numel() == 4);
  CHECK(zeros_like(ones({3}, DType::Float16)).dtype() == DType::Float16);
}
