// The transformer kernel's fused element-wise ops against the ops they fuse: bias_gelu equals
// gelu(x + bias) and bias_dropout_add equals residual + dropout(x + bias) (or residual +
// dropout(x) without a bias) bit for bit, values
// and gradients, in every floating dtype, at sizes that split over threads, under data- and
// sequence-parallel shards (the same mask one process draws); bad arguments are errors. Their
// values against PyTorch are the op catalog's (bias_gelu, bias_gelu_tanh, bias_dropout_add).
#include <doctest/doctest.h>

#include <omp.h>

#include "tessera/tessera.h"

using namespace tessera;

namespace {

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && a.to_vector() == b.to_vector();
}

Tensor leaf(const Tensor& t) {
  return t.detach().clone().requires_grad_(true);
}

// Values and the gradients of every input under the same upstream gradient, for f and g.
void check_same(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                const std::function<Tensor(const std::vector<Tensor>&)>& g,
                const std::vector<Tensor>& inputs) {
  std::vector<Tensor> a, b;
  for (const Tensor& t : inputs) {
    a.push_back(leaf(t));
    b.push_back(leaf(t));
  }
  const Tensor ya = f(a), yb = g(b);
  CHECK(same(ya, yb));
  const Tensor up = randn(ya.shape()).to(ya.dtype());
  autograd::backward({ya}, {up});
  autograd::backward({yb}, {up});
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("input ", i);
    CHECK(same(a[i].grad(), b[i].grad()));
  }
}

}  // namespace

TEST_CASE("bias_gelu equals gelu(x + bias), values and gradients, bit for bit") {
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16})
    for (GeluApprox form : {GeluApprox::None, GeluApprox::Tanh})
      for (const Shape& shape : {Shape{5, 7}, Shape{3, 97, 301}}) {
        INFO(std::string(dtype_name(d)), " tanh ", form == GeluApprox::Tanh, " ", shape.size());
        check_same([form](const std::vector<Tensor>& x) { return bias_gelu(x[0], x[1], form); },
                   [form](const std::vector<Tensor>& x) { return gelu(x[0] + x[1], form); },
                   {randn(shape).to(d), randn({shape.back()}).to(d)});
      }
  // The threads split the elements; the values do not move.
  const Tensor x = randn({64, 1000}), b = randn({1000});
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tensor one = bias_gelu(x, b);
  omp_set_num_threads(std::max(2, threads));
  CHECK(same(bias_gelu(x, b), one));
  omp_set_num_threads(threads);
  CHECK_THROWS_WITH_AS(bias_gelu(x, randn({999})), doctest::Contains("bias must be [1000]"), Error);
  CHECK_THROWS_WITH_AS(bias_gelu(x, b.to(DType::BFloat16)), doctest::Contains("bias_gelu"), Error);
}

TEST_CASE("bias_dropout_add equals residual + dropout(x + bias), mask and gradients included") {
  for (DType d : {DType::Float32, DType::Float64, DType::BFloat16, DType::Float16})
    for (const Shape& shape : {Shape{6, 5}, Shape{4, 33, 129}}) {
      INFO(std::string(dtype_name(d)), " ", shape.size());
      const std::vector<Tensor> in{randn(shape).to(d), randn({shape.back()}).to(d),
                                   randn(shape).to(d)};
      check_same(
          [](const std::vector<Tensor>& x) {
            Generator gen(5);
            return bias_dropout_add(x[0], x[1], x[2], 0.3, true, &gen);
          },
          [](const std::vector<Tensor>& x) {
            Generator gen(5);
            return x[2] + dropout(x[0] + x[1], 0.3, true, &gen);
          },
          in);
    }
  // Without a bias (the GEMM before it added one): residual + dropout(x).
  check_same(
      [](const std::vector<Tensor>& x) {
        Generator gen(6);
        return bias_dropout_add(x[0], {}, x[1], 0.2, true, &gen);
      },
      [](const std::vector<Tensor>& x) {
        Generator gen(6);
        return x[1] + dropout(x[0], 0.2, true, &gen);
      },
      {randn({5, 40}), randn({5, 40})});
  const Tensor x = randn({4, 6, 8}), b = randn({8}), r = randn({4, 6, 8});
  // Outside training (or p = 0): residual + x + bias, no draw.
  Generator gen(5);
  CHECK(same(bias_dropout_add(x, b, r, 0.3, false, &gen), r + (x + b)));
  CHECK(gen.state().offset == 0);
  // A data-parallel rank and a sequence-parallel rank draw their part of one process's mask.
  for (int rank = 0; rank < 2; ++rank) {
    Generator g1(9), g2(9);
    const Tensor whole_x = randn({4, 6, 8}), whole_r = randn({4, 6, 8});
    set_data_parallel_shard(0, 1);
    const Tensor whole = bias_dropout_add(whole_x, b, whole_r, 0.5, true, &g1);
    {
      SequenceShardGuard seq(rank, 2);
      const Tensor part = bias_dropout_add(whole_x.narrow(1, 3 * rank, 3), b,
                                           whole_r.narrow(1, 3 * rank, 3), 0.5, true, &g2);
      CHECK(same(part, whole.narrow(1, 3 * rank, 3).contiguous()));
    }
    Generator g3(9);
    set_data_parallel_shard(rank, 2);
    const Tensor half = bias_dropout_add(whole_x.narrow(0, 2 * rank, 2), b,
                                         whole_r.narrow(0, 2 * rank, 2), 0.5, true, &g3);
    set_data_parallel_shard(0, 1);
    CHECK(same(half, whole.narrow(0, 2 * rank, 2).contiguous()));
  }
  CHECK_THROWS_WITH_AS(bias_dropout_add(x, b, randn({4, 6, 7}), 0.1), doctest::Contains("residual"),
                       Error);
  CHECK_THROWS_WITH_AS(bias_dropout_add(x, b, r, 1.5), doctest::Contains("probability"), Error);
}
