// Split backward (zero-bubble pipelines): the inputs' gradients first, touching no parameter,
// then the rest; together they give backward()'s gradients. The reference is central finite
// differences in float64 (independent of autograd), and backward() itself.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "tessera/tessera.h"

using namespace tessera;

namespace {

struct Net {
  std::map<std::string, Tensor> p;  // parameters
  Net() {
    Generator gen(21);
    auto r = [&](Shape s) { return randn(s, DType::Float64, Device::cpu(), &gen) * 0.5; };
    p = {{"w1", r({5, 3})}, {"b1", r({5})},    {"g", r({5}) + 1.0},
         {"beta", r({5})},  {"wc", r({5, 5})}, {"w2", r({3, 5})}};
  }
  // Linear, layer norm, a checkpointed block closing over a weight, and w1 used twice
  // (linear, then a plain matmul): a weight reached on two paths and inside a rerun.
  Tensor loss(const Tensor& x, bool checkpointed) const {
    Tensor h = layer_norm(tanh(linear(x, p.at("w1"), p.at("b1"))), {5}, p.at("g"), p.at("beta"));
    auto block = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{tanh(linear(in[0], p.at("wc")))};
    };
    const Tensor h2 = checkpointed ? autograd::checkpoint(block, {h})[0] : block({h})[0];
    const Tensor out = linear(h2, p.at("w2")) + matmul(h2, p.at("w1"));
    return sum(out * out);
  }
};

Tensor input() {
  Generator gen(4);
  return randn({4, 3}, DType::Float64, Device::cpu(), &gen);
}

// d loss / d t by central differences, t one of the net's tensors or the input.
std::vector<double> finite_difference(const Net& net, Tensor& t, const Tensor& x) {
  NoGradGuard no_grad;
  std::vector<double> out;
  double* v = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double keep = v[i], h = 1e-6;
    v[i] = keep + h;
    const double up = net.loss(x, false).item();
    v[i] = keep - h;
    const double down = net.loss(x, false).item();
    v[i] = keep;
    out.push_back((up - down) / (2 * h));
  }
  return out;
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(tol));
}

}  // namespace

TEST_CASE("split backward: the input's gradient first, no parameter touched; then the rest") {
  for (const bool checkpointed : {false, true}) {
    CAPTURE(checkpointed);
    Net net;
    Tensor x = input();
    std::map<std::string, std::vector<double>> expected;
    for (auto& [name, t] : net.p) expected[name] = finite_difference(net, t, x);
    const std::vector<double> expected_x = finite_difference(net, x, x);

    std::map<std::string, int> hooks;
    for (auto& [name, t] : net.p) {
      t.requires_grad_(true);
      const std::string n = name;  // (clang 14 cannot capture bindings)
      t.register_hook([&hooks, n](const Tensor&) { ++hooks[n]; });
    }
    x.requires_grad_(true);
    autograd::DeferredGrads rest = autograd::backward_inputs({net.loss(x, checkpointed)}, {}, {x});
    REQUIRE(x.grad().defined());
    check_close(x.grad().to_vector(), expected_x, 1e-6);
    for (auto& named : net.p) {
      const std::string name = named.first;  // (clang 14 cannot capture bindings)
      CHECK_MESSAGE(!named.second.grad().defined(), name);
    }
    CHECK(hooks.empty());
    CHECK_FALSE(rest.empty());

    rest.run();
    for (auto& named : net.p) {
      const std::string name = named.first;
      const Tensor& t = named.second;
      CAPTURE(name);
      REQUIRE(t.grad().defined());
      check_close(t.grad().to_vector(), expected[name], 1e-6);
      CHECK(hooks[name] == 1);  // once, w1's two paths summed first
    }
    CHECK(rest.empty());
    rest.run();  // nothing left: a second run adds nothing
    check_close(net.p["w1"].grad().to_vector(), expected["w1"], 1e-6);

    // backward() on the same net gives the same gradients to the last bits but rounding.
    Net plain;
    Tensor xp = input().requires_grad_(true);
    for (auto& [name, t] : plain.p) t.requires_grad_(true);
    plain.loss(xp, checkpointed).backward();
    check_close(x.grad().to_vector(), xp.grad().to_vector(), 1e-12);
    for (auto& [name, t] : plain.p)
      check_close(net.p[name].grad().to_vector(), t.grad().to_vector(), 1e-12);
  }
}

TEST_CASE("split backward: with no inputs the first part touches no leaf either") {
  Net net;
  const Tensor x = input();
  for (auto& [name, t] : net.p) t.requires_grad_(true);
  autograd::DeferredGrads rest = autograd::backward_inputs({net.loss(x, true)}, {}, {});
  for (auto& [name, t] : net.p) CHECK(!t.grad().defined());
  rest.run();
  for (auto& named : net.p) {
    const std::string name = named.first;
    Tensor& t = named.second;
    CAPTURE(name);
    check_close(t.grad().to_vector(), finite_difference(net, t, x), 1e-6);
  }
}

TEST_CASE("split backward: an op is asked for its input's gradient, later for its weight's") {
  std::vector<std::vector<bool>> asked;
  auto scale = [&](const Tensor& x, const Tensor& w) {
    return autograd::CustomFunction::apply(
        {x, w},
        [](autograd::FunctionContext& ctx, const std::vector<Tensor>& in) {
          ctx.save_for_backward(in);
          return std::vector<Tensor>{in[0] * in[1]};
        },
        [&asked](autograd::FunctionContext& ctx, const std::vector<Tensor>& g) {
          const bool dx = autograd::input_grad_wanted(0), dw = autograd::input_grad_wanted(1);
          asked.push_back({dx, dw});
          const auto s = ctx.saved();
          return std::vector<Tensor>{dx ? g[0] * s[1] : Tensor(), dw ? g[0] * s[0] : Tensor()};
        },
        "Scale")[0];
  };
  Tensor x = from_vector(std::vector<double>{2, 3}, {2}, DType::Float64).requires_grad_(true);
  Tensor w = from_vector(std::vector<double>{5, 7}, {2}, DType::Float64).requires_grad_(true);
  autograd::DeferredGrads rest = autograd::backward_inputs({sum(scale(x, w))}, {}, {x});
  CHECK(x.grad().to_vector() == std::vector<double>{5, 7});
  CHECK(!w.grad().defined());
  rest.run();
  CHECK(w.grad().to_vector() == std::vector<double>{2, 3});
  CHECK(asked == std::vector<std::vector<bool>>{{true, false}, {false, true}});

  asked.clear();
  Tensor x2 = x.detach().requires_grad_(true), w2 = w.detach().requires_grad_(true);
  sum(scale(x2, w2)).backward();  // a plain backward asks for both at once
  CHECK(asked == std::vector<std::vector<bool>>{{true, true}});
}
