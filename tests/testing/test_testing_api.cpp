// The public kernel-testing helpers: they must find real differences, not only pass.
#include <doctest/doctest.h>

#include "tessera/tessera.h"
#include "tessera/testing.h"

using namespace tessera;

TEST_CASE("compare reports the worst element and its position") {
  const Tensor ref = from_vector({1.0, 2.0, 3.0, 4.0}, {2, 2}, DType::Float64);
  const Tensor bad = from_vector({1.0, 2.0, 3.5, 4.0}, {2, 2}, DType::Float32);
  const auto r = testing::compare(bad, ref);
  CHECK_FALSE(r.ok);
  CHECK(r.worst_index == 2);
  CHECK(r.actual == 3.5);
  CHECK(r.expected == 3.0);
  CHECK(r.message.find("flat index 2") != std::string::npos);
  CHECK(testing::compare(ref.to(DType::Float32), ref).ok);
  CHECK_FALSE(testing::compare(zeros({2}), zeros({3})).ok);
}

TEST_CASE("compare tolerances follow the dtype") {
  const Tensor ref = from_vector({1.0}, {1}, DType::Float64);
  const Tensor off = from_vector({1.004}, {1}, DType::Float64);
  CHECK(testing::compare(off.to(DType::BFloat16), ref).ok);       // bf16 rounds to 1.0
  CHECK_FALSE(testing::compare(off.to(DType::Float32), ref).ok);  // float32 sees the 0.4%
}

TEST_CASE("gradcheck passes a correct gradient and catches a wrong one") {
  const Tensor x = randn({3, 2}, DType::Float64).requires_grad_();
  auto good = [](const std::vector<Tensor>& in) { return tanh(in[0]) * in[0]; };
  CHECK(testing::gradcheck(good, {x}).ok);
  auto wrong = [](const std::vector<Tensor>& in) {
    return autograd::CustomFunction::apply(
        in,
        [](autograd::FunctionContext& ctx, const std::vector<Tensor>& v) {
          ctx.save_for_backward({v[0]});
          return std::vector<Tensor>{v[0] * v[0]};
        },
        [](autograd::FunctionContext& ctx, const std::vector<Tensor>& g) {
          return std::vector<Tensor>{g[0] * ctx.saved()[0] * 3.0};  // should be 2x
        })[0];
  };
  const auto r = testing::gradcheck(wrong, {x});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("analytic") != std::string::npos);
}

TEST_CASE("TS_CHECK_CLOSE works from a user's doctest suite") {
  TS_CHECK_CLOSE(softmax(zeros({4})), full({4}, 0.25, DType::Float64));
}
