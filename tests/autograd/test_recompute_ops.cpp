// Ops that keep less for backward and recompute it there (DeepSpeed's memory options):
// gelu_linear against linear(gelu(x)) bit for bit, layer_norm_invertible against layer_norm
// (to rounding) and against finite differences in float64.
#include <doctest/doctest.h>

#include <functional>

#include "relative_error.h"
#include "tessera/tessera.h"
#include "tessera/testing.h"

using namespace tessera;

namespace {

struct Grads {
  Tensor y;
  std::vector<Tensor> d;
};

// fn's output and the gradients of sum(y * r) for each input.
Grads run(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
          const std::vector<Tensor>& values, const Tensor& r) {
  std::vector<Tensor> in;
  for (const Tensor& v : values) in.push_back(v.defined() ? v.clone().requires_grad_() : v);
  Grads g;
  g.y = fn(in);
  sum(g.y * r).backward();
  for (const Tensor& t : in) g.d.push_back(t.defined() ? t.grad() : Tensor());
  return g;
}

void check_same(const Grads& a, const Grads& b, double tolerance) {
  CHECK(rel_diff(a.y, b.y) <= tolerance);
  for (size_t i = 0; i < a.d.size(); ++i) {
    CAPTURE(i);
    if (a.d[i].defined()) CHECK(rel_diff(a.d[i], b.d[i]) <= tolerance);
  }
}

}  // namespace

TEST_CASE("gelu_linear: linear(gelu(x)) bit for bit, forward and gradients") {
  manual_seed(4);
  const Tensor x = randn({2, 5, 12}), w = randn({7, 12}), b = randn({7}), r = randn({2, 5, 7});
  for (const GeluApprox a : {GeluApprox::None, GeluApprox::Tanh}) {
    for (const bool with_bias : {true, false}) {
      CAPTURE(with_bias);
      const std::vector<Tensor> in{x, w, with_bias ? b : Tensor()};
      const Grads fused = run(
          [a](const std::vector<Tensor>& t) { return gelu_linear(t[0], t[1], t[2], a); }, in, r);
      const Grads plain = run(
          [a](const std::vector<Tensor>& t) { return linear(gelu(t[0], a), t[1], t[2]); }, in, r);
      check_same(fused, plain, 0.0);
    }
  }
  CHECK_THROWS_WITH_AS(gelu_linear(x, randn({7, 5})), doctest::Contains("gelu_linear: input"),
                       Error);
}

TEST_CASE("layer_norm_invertible: layer_norm's values, its gradients to rounding") {
  manual_seed(5);
  const Tensor x = randn({3, 4, 16}) * 3.0 + 1.0, w = randn({16}), b = randn({16}),
               r = randn({3, 4, 16});
  const auto inv = [](const std::vector<Tensor>& t) {
    return layer_norm_invertible(t[0], {16}, t[1], t[2], 1e-5);
  };
  const auto plain = [](const std::vector<Tensor>& t) {
    return layer_norm(t[0], {16}, t[1], t[2], 1e-5);
  };
  const Grads a = run(inv, {x, w, b}, r), p = run(plain, {x, w, b}, r);
  CHECK(rel_diff(a.y, p.y) == 0);
  check_same(a, p, 1e-5);
  // A zero weight entry cannot be inverted: the input is kept, so the gradients are layer_norm's.
  Tensor w0 = w.clone();
  w0.narrow(0, 3, 1).fill_(0.0);
  check_same(run(inv, {x, w0, b}, r), run(plain, {x, w0, b}, r), 0.0);
  // Against finite differences, float64 (no bias: rebuilt without it).
  const std::vector<Tensor> in64{cast(x, DType::Float64).narrow(0, 0, 1).requires_grad_(),
                                 cast(w, DType::Float64).requires_grad_()};
  TS_CHECK_GRADCHECK(
      [](const std::vector<Tensor>& t) {
        return layer_norm_invertible(t[0], {16}, t[1], Tensor(), 1e-5);
      },
      in64);
}

TEST_CASE("layer_norm_invertible: changing its output in place before backward is an error") {
  Tensor x = randn({2, 8}).requires_grad_();
  const Tensor w = ones({8}) * 2.0, b = zeros({8});
  Tensor y = layer_norm_invertible(x, {8}, w, b);
  const Tensor loss = sum(y * y);
  Tensor kept = y.detach();
  {
    NoGradGuard no_grad;
    kept.add_(ones({2, 8}));
  }
  CHECK_THROWS_WITH_AS(loss.backward(), doctest::Contains("modified by an in-place operation"),
                       Error);
}
