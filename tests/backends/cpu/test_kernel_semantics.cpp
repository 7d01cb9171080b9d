// Kernel behaviour the catalog's random inputs do not reach: edge cases, errors,
// determinism and dropout statistics.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include <omp.h>

#include "tessera/tessera.h"

using namespace tessera;

TEST_CASE("dropout keeps about 1-p of elements and scales them by 1/(1-p)") {
  Generator gen(5);
  const Tensor x = ones({20000});
  const Tensor y = dropout(x, 0.25, true, &gen);
  const auto v = y.to_vector();
  int64_t kept = 0;
  for (double e : v) {
    CHECK((e == 0.0 || std::fabs(e - 1.0 / 0.75) < 1e-6));
    kept += e != 0.0;
  }
  CHECK(std::fabs(kept / 20000.0 - 0.75) < 0.02);
  CHECK(dropout(x, 0.25, false).same(x));
}

TEST_CASE("cross_entropy rejects out-of-range targets naming the position") {
  const Tensor logits = zeros({3, 4});
  const Tensor targets = from_vector(std::vector<int64_t>{0, 7, 1}, {3});
  CHECK_THROWS_WITH_AS(cross_entropy(logits, targets), doctest::Contains("target 7 at position 1"),
                       Error);
}

TEST_CASE("embedding rejects an index outside the table") {
  const Tensor w = zeros({5, 2});
  CHECK_THROWS_WITH_AS(embedding(w, from_vector(std::vector<int64_t>{1, 5}, {2})),
                       doctest::Contains("index 5 at position 1"), Error);
}

TEST_CASE("attention with a fully masked row gives zeros, not NaN") {
  const Tensor q = randn({1, 1, 2, 4}), k = randn({1, 1, 3, 4}), v = randn({1, 1, 3, 4});
  Tensor mask = full({1, 1, 2, 3}, 1.0, DType::Bool);
  mask.select(2, 0).fill_(0.0);
  const auto o = scaled_dot_product_attention(q, k, v, mask).to_vector();
  for (int i = 0; i < 4; ++i) CHECK(o[i] == 0.0);
  for (int i = 4; i < 8; ++i) CHECK(std::isfinite(o[i]));
}

TEST_CASE("large reductions are bit-identical whatever the thread count") {
  Generator gen(3);
  const Tensor x = randn({1 << 18}, DType::Float32, Device::cpu(), &gen);
  const double a = sum(x).item();
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double b = sum(x).item();
  omp_set_num_threads(threads);
  CHECK(a == b);
}

TEST_CASE("element-wise transcendental kernels are bit-identical whatever the thread count") {
  // Eigen's scalar exp, erf and tanh round differently from its vector ones; the kernels put
  // every element on the same path however the threads split the tensor (87591 elements: the
  // split of two threads falls inside a vector, where exp differed in 3 elements and GELU's
  // gradient in 1 before).
  const Tensor x = randn({87591}), g = randn({87591});
  const std::vector<std::function<Tensor(const Tensor&)>> ops{
      [](const Tensor& t) { return exp(t); },
      [](const Tensor& t) { return log(abs(t) + 1.0); },
      [](const Tensor& t) { return rsqrt(abs(t) + 1.0); },
      [](const Tensor& t) { return tanh(t); },
      [](const Tensor& t) { return sigmoid(t); },
      [](const Tensor& t) { return gelu(t); },
      [](const Tensor& t) { return gelu(t, GeluApprox::Tanh); },
      [&g](const Tensor& t) {  // GELU's gradients, exact and tanh
        Tensor a = t.detach().clone().requires_grad_(true);
        autograd::backward({gelu(a) + gelu(a, GeluApprox::Tanh) * 2.0}, {g});
        return a.grad();
      }};
  const int threads = omp_get_max_threads();
  for (DType d : {DType::Float32, DType::BFloat16})
    for (size_t k = 0; k < ops.size(); ++k) {
      omp_set_num_threads(1);
      const std::vector<double> one = ops[k](x.to(d)).to_vector();
      omp_set_num_threads(std::max(2, threads));
      const std::vector<double> many = ops[k](x.to(d)).to_vector();
      omp_set_num_threads(threads);
      INFO("op ", k, " ", std::string(dtype_name(d)));
      CHECK(one == many);
    }
}

TEST_CASE("sum of a large float32 tensor stays accurate") {
  const Tensor x = full({1 << 20}, 0.1);
  CHECK(std::fabs(sum(x).item() - 104857.6) < 0.05);
}

TEST_CASE("NaN propagates through max and softmax rather than being hidden") {
  const Tensor x = from_vector(std::vector<double>{1.0, NAN, 3.0}, {3});
  CHECK(std::isnan(amax(x).item()));
  CHECK(argmax(x, 0).item() == 1);
}

TEST_CASE("integer arithmetic and true division") {
  const Tensor a = from_vector(std::vector<int64_t>{7, -3}, {2});
  const Tensor b = from_vector(std::vector<int64_t>{2, 2}, {2});
  CHECK((a + b).dtype() == DType::Int64);
  CHECK((a + b).to_vector() == std::vector<double>{9, -1});
  const Tensor q = a / b;
  CHECK(q.dtype() == DType::Float32);
  CHECK(q.to_vector() == std::vector<double>{3.5, -1.5});
  CHECK(sum(a).dtype() == DType::Int64);
}

TEST_CASE("matmul rejects mismatched inner dimensions naming both shapes") {
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 3}), zeros({4, 5})),
                       doctest::Contains("float32[2, 3] on cpu @ float32[4, 5] on cpu"), Error);
}

TEST_CASE("no kernel for a dtype is a clear error naming op, dtype and device") {
  CHECK_THROWS_WITH_AS(exp(zeros({2}, DType::Int32)), doctest::Contains("exp"), Error);
  CHECK_THROWS_WITH_AS(matmul(zeros({2, 2}, DType::Int64), zeros({2, 2}, DType::Int64)),
                       doctest::Contains("floating"), Error);
}

TEST_CASE("exp and sigmoid of -inf are exactly 0; results below the normal range are 0") {
  // Eigen's vectorised exp alone gives 2.9e-39 for exp(-inf) in float32 (a subnormal that
  // also slowed causal attention ~30x); torch gives 0.
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    INFO(dtype_name(dt));
    const auto y =
        exp(from_vector(
                std::vector<double>{-INFINITY, -1000.0, -50.0, 0.0, 2.0, INFINITY, NAN, -80.0}, {8})
                .to(dt))
            .to(DType::Float64)
            .to_vector();
    CHECK(y[0] == 0.0);
    CHECK(y[1] == 0.0);
    CHECK(std::fabs(y[2] - std::exp(-50.0)) <= 1e-2 * std::exp(-50.0));
    CHECK(y[3] == 1.0);
    CHECK(std::fabs(y[4] - std::exp(2.0)) <= 1e-2 * std::exp(2.0));
    CHECK(std::isinf(y[5]));
    CHECK(std::isnan(y[6]));
    for (double v : y) CHECK(std::fpclassify(v) != FP_SUBNORMAL);
    if (dt == DType::Float64) CHECK(std::fabs(y[7] - std::exp(-80.0)) <= 1e-12 * std::exp(-80.0));
    // sigmoid goes through the same exp in Eigen
    const auto s =
        sigmoid(from_vector(std::vector<double>{-INFINITY, -1000.0, -30.0, 0.0}, {4}).to(dt))
            .to(DType::Float64)
            .to_vector();
    CHECK(s[0] == 0.0);
    CHECK(s[1] == 0.0);
    CHECK(std::fabs(s[2] - 1.0 / (1.0 + std::exp(30.0))) <= 1e-2 / (1.0 + std::exp(30.0)));
    CHECK(s[3] == 0.5);
  }
}

TEST_CASE("cross_entropy with every target ignored: NaN loss and zero gradient, as torch") {
  Tensor x = randn({3, 4}).requires_grad_();
  const Tensor t = full({3}, -100, DType::Int64);
  const Tensor loss = cross_entropy(x, t);
  CHECK(std::isnan(loss.item()));
  loss.backward();
  CHECK(x.grad().to_vector() == std::vector<double>(12, 0.0));
  // Summed, the same batch is 0: data-parallel ranks without targets contribute nothing.
  Tensor y = randn({3, 4}).requires_grad_();
  const Tensor s = cross_entropy(y, t, -100, 0.0, Reduction::Sum);
  CHECK(s.item() == 0.0);
  s.backward();
  CHECK(y.grad().to_vector() == std::vector<double>(12, 0.0));
  // With targets, the sum is the mean times their count.
  const Tensor some = from_vector(std::vector<int64_t>{1, -100, 3}, {3});
  CHECK(cross_entropy(y, some, -100, 0.0, Reduction::Sum).item() ==
        doctest::Approx(2.0 * cross_entropy(y, some).item()));
}

TEST_CASE("products and views of empty tensors are empty, as torch") {
  const Tensor a = zeros({0, 0}), b = zeros({0, 5}), c = zeros({3, 0});
  CHECK(matmul(a, b).shape() == Shape{0, 5});
  CHECK(matmul(c, zeros({0, 4})).to_vector() == std::vector<double>(12, 0.0));  // K = 0: zeros
  CHECK(a.t().view({0}).numel() == 0);
  CHECK(linear(zeros({2, 0}), zeros({3, 0}), ones({3})).to_vector() == std::vector<double>(6, 1.0));
}

TEST_CASE("cross_entropy of a row is bit-identical wherever the row lies in memory") {
  // Ranks holding a shard of the batch see a sample's logits at another address than one
  // process does; a vectorised exp must not take another path for an unaligned row start.
  manual_seed(3);
  const int64_t C = 1003;  // odd: rows start at every alignment
  const Tensor x = randn({9, C}) * 4.0;
  const Tensor t = from_vector(std::vector<int64_t>{5, 0, 1002, 7, 300, 1, 2, 999, 44}, {9});
  for (int64_t r = 0; r < 9; ++r) {
    CAPTURE(r);
    Tensor in_place = x.narrow(0, r, 1).detach().requires_grad_();
    Tensor alone = x.narrow(0, r, 1).contiguous().clone().detach().requires_grad_();
    const Tensor a = cross_entropy(in_place, t.narrow(0, r, 1), -100, 0.1, Reduction::Sum);
    const Tensor b = cross_entropy(alone, t.narrow(0, r, 1), -100, 0.1, Reduction::Sum);
    CHECK(a.item() == b.item());
    a.backward();
    b.backward();
    CHECK(in_place.grad().to_vector() == alone.grad().to_vector());
  }
}
