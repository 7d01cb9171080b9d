// Autograd engine semantics. Expected gradients are derived by hand in the comments.
#include <doctest/doctest.h>

#include <cmath>

#include "tessera/tessera.h"

using namespace tessera;

namespace {
Tensor vec(std::vector<double> v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, DType::Float64);
}
}  // namespace

TEST_CASE("shared subexpressions accumulate: d/dx (x*x + x*x) = 4x") {
  Tensor x = vec({1, -2, 3}).requires_grad_();
  const Tensor y = x * x;
  sum(y + y).backward();
  CHECK(x.grad().to_vector() == std::vector<double>{4, -8, 12});
}

TEST_CASE("leaves that receive the same gradient tensor get separate .grad tensors") {
  Tensor a = vec({1, 2}).requires_grad_(), b = vec({3, 4}).requires_grad_();
  sum((a + b) * 2.0).backward();  // add's backward passes one fresh tensor to both inputs
  CHECK_FALSE(a.grad().storage() == b.grad().storage());
  {
    NoGradGuard g;
    a.grad().mul_(10.0);
  }
  CHECK(b.grad().to_vector() == std::vector<double>{2, 2});
  sum((a + b) * 2.0).backward();
  CHECK(a.grad().to_vector() == std::vector<double>{22, 22});
  CHECK(b.grad().to_vector() == std::vector<double>{4, 4});
}

TEST_CASE("gradients accumulate across two backward calls") {
  Tensor x = vec({1, 2}).requires_grad_();
  sum(x * 3.0).backward();
  sum(x * x).backward();  // 3 + 2x
  CHECK(x.grad().to_vector() == std::vector<double>{5, 7});
}

TEST_CASE("no-grad scope records nothing") {
  Tensor x = vec({1}).requires_grad_();
  Tensor y;
  {
    NoGradGuard g;
    y = x * 2.0;
  }
  CHECK_FALSE(y.requires_grad());
  CHECK(y.grad_fn() == nullptr);
  CHECK((x * 2.0).requires_grad());
}

TEST_CASE("modifying a saved tensor in place is an error at backward time") {
  Tensor w = vec({1, 2}).requires_grad_();
  Tensor x = vec({3, 4});
  const Tensor y = sum(w * x);  // saves x
  x.add_(vec({1, 1}));
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("modified by an in-place operation"), Error);
}

TEST_CASE("in-place writes to tensors in the graph are refused with a clear message") {
  Tensor w = vec({1}).requires_grad_();
  CHECK_THROWS_WITH_AS(w.add_(vec({1})), doctest::Contains("NoGradGuard"), Error);
  Tensor h = w * 2.0;
  CHECK_THROWS_WITH_AS(h.mul_(2.0), doctest::Contains("out-of-place"), Error);
  NoGradGuard g;
  w.add_(vec({1}));  // allowed: an optimizer update
  CHECK(w.to_vector() == std::vector<double>{2});
}

TEST_CASE("gradient-ready hooks fire once per backward, after the gradient is complete") {
  Tensor x = vec({1, 2}).requires_grad_();
  int calls = 0;
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    seen = g.to_vector();
  });
  sum(x * x + x * 5.0).backward();  // x used twice; 2x + 5
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>{7, 9});
  CHECK_THROWS_AS((x * 2.0).register_hook([](const Tensor&) {}), Error);
}

TEST_CASE("retain_graph allows a second backward; without it the second is an error") {
  Tensor x = vec({2}).requires_grad_();
  const Tensor y = sum(exp(x));
  y.backward(Tensor(), true);
  y.backward();
  CHECK(x.grad().item() == doctest::Approx(2 * std::exp(2.0)));
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("second time"), Error);
}

TEST_CASE("backward from a non-scalar needs an explicit gradient") {
  Tensor x = vec({1, 2}).requires_grad_();
  const Tensor y = x * x;
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("only for scalar outputs"), Error);
  y.backward(vec({1, 10}));
  CHECK(x.grad().to_vector() == std::vector<double>{2, 40});
  CHECK_THROWS_WITH_AS(vec({1}).backward(), doctest::Contains("does not require grad"), Error);
}

TEST_CASE("gradients flow through views and broadcasting") {
  Tensor x = from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, DType::Float64).requires_grad_();
  Tensor b = vec({1, 1, 1}).requires_grad_();
  sum(x.t().narrow(0, 1, 2) * 2.0 + b.narrow(0, 0, 2).unsqueeze(1)).backward();
  // x.t() rows 1..2 are x columns 1..2: gradient 2 there, 0 in column 0.
  CHECK(x.grad().to_vector() == std::vector<double>{0, 2, 2, 0, 2, 2});
  // b[0:2] is broadcast across x's 2 rows.
  CHECK(b.grad().to_vector() == std::vector<double>{2, 2, 0});
}

TEST_CASE("custom functions supply their own gradient") {
  Tensor x = vec({3}).requires_grad_();
  auto cube = [](const Tensor& in) {
    return autograd::CustomFunction::apply(
        {in},
        [](autograd::FunctionContext& ctx, const std::vector<Tensor>& v) {
          ctx.save_for_backward({v[0]});
          return std::vector<Tensor>{v[0] * v[0] * v[0]};
        },
        [](autograd::FunctionContext& ctx, const std::vector<Tensor>& g) {
          const Tensor s = ctx.saved()[0];
          return std::vector<Tensor>{g[0] * s * s * 3.0};
        },
        "Cube")[0];
  };
  const Tensor y = cube(x);
  CHECK(y.grad_fn()->name() == "Cube");
  y.backward();
  CHECK(x.grad().item() == 27.0);
}

TEST_CASE("checkpoint gives the gradients of a plain backward and keeps no inner graph") {
  Generator gen(11);
  const Tensor w1 = randn({4, 4}, DType::Float64, Device::cpu(), &gen);
  const Tensor x0 = randn({3, 4}, DType::Float64, Device::cpu(), &gen);
  auto block = [&](const Tensor& x, const Tensor& w) {
    Generator drop(3);
    return gelu(matmul(dropout(x, 0.2), w)) * x;
  };
  Tensor wa = w1.clone().requires_grad_(), xa = x0.clone().requires_grad_();
  manual_seed(5);
  sum(block(xa, wa)).backward();

  Tensor wb = w1.clone().requires_grad_(), xb = x0.clone().requires_grad_();
  manual_seed(5);
  const auto out = autograd::checkpoint(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block(in[0], in[1])}; },
      {xb, wb});
  CHECK(out[0].grad_fn()->name() == "CheckpointBackward");
  sum(out[0]).backward();
  CHECK(xb.grad().to_vector() == xa.grad().to_vector());
  CHECK(wb.grad().to_vector() == wa.grad().to_vector());
}

TEST_CASE("requires_grad only on floating leaves") {
  CHECK_THROWS_WITH_AS(zeros({2}, DType::Int64).requires_grad_(), doctest::Contains("floating"),
                       Error);
  Tensor x = ones({1}).requires_grad_();
  CHECK_THROWS_AS((x * 2.0).requires_grad_(), Error);
}

TEST_CASE("a graph never run backward is freed with its tensors, ops saving their output too") {
  // softmax, exp, tanh and sigmoid keep their own output for backward: the node must not hold
  // itself through that output's history (a forward in grad mode whose loss is dropped, as an
  // evaluation that forgot NoGradGuard, would leak every step).
  Allocator& memory = allocator_for(DeviceType::CPU);
  const Tensor w = randn({64, 64}).requires_grad_();
  const int64_t before = memory.stats().allocated;
  for (int step = 0; step < 3; ++step) {
    const Tensor y = sum(sigmoid(tanh(exp(softmax(matmul(w, w), -1)))));
    CHECK(y.requires_grad());
  }
  CHECK(memory.stats().allocated == before);
}

TEST_CASE("a gradient of another floating dtype takes its output's dtype, as torch") {
  // (It used to reach the kernels as it was: a float32 gradient read as bfloat16 numbers.)
  const Tensor x = randn({300}).to(DType::BFloat16), g = randn({300});
  Tensor a = x.detach().clone().requires_grad_(true), b = x.detach().clone().requires_grad_(true);
  autograd::backward({gelu(a)}, {g});
  autograd::backward({gelu(b)}, {g.to(DType::BFloat16)});
  CHECK(a.grad().dtype() == DType::BFloat16);
  CHECK(a.grad().to_vector() == b.grad().to_vector());
  Tensor c = x.detach().clone().requires_grad_(true);
  CHECK_THROWS_WITH_AS(autograd::backward({gelu(c)}, {g.to(DType::Int64)}),
                       doctest::Contains("cannot stand for output"), Error);
}
