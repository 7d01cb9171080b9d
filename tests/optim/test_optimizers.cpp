// Optimizer updates and schedules against their formulas, written out in double here.
#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>

#include "tessera/engine/loss_scaler.h"
#include "tessera/error.h"
#include "tessera/ops.h"
#include "tessera/optim/lr_schedule.h"
#include "tessera/optim/optimizer.h"

using namespace tessera;

namespace {
Tensor param(std::vector<double> v, std::vector<double> g) {
  Tensor p = from_vector(v, {static_cast<int64_t>(v.size())}, DType::Float64).requires_grad_();
  p.set_grad(from_vector(g, {static_cast<int64_t>(g.size())}, DType::Float64));
  return p;
}
}  // namespace

TEST_CASE("AdamW: two steps against the formula") {
  Tensor p = param({1.0, -2.0}, {0.5, -0.1});
  optim::Adam opt({{{"p"}, {p}, 0.1, 0.01}}, optim::AdamOptions{0.9, 0.999, 1e-8, true});
  double x[2] = {1.0, -2.0}, m[2] = {0, 0}, v[2] = {0, 0};
  const double g[2] = {0.5, -0.1};
  for (int t = 1; t <= 2; ++t) {
    opt.step();
    for (int i = 0; i < 2; ++i) {
      x[i] -= 0.1 * 0.01 * x[i];
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.999 * v[i] + 0.001 * g[i] * g[i];
      x[i] -= 0.1 / (1 - std::pow(0.9, t)) * m[i] /
              (std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
    }
  }
  const auto got = p.to_vector();
  CHECK(got[0] == doctest::Approx(x[0]).epsilon(1e-12));
  CHECK(got[1] == doctest::Approx(x[1]).epsilon(1e-12));
  CHECK(opt.state_dict().count("p.exp_avg"));
}

TEST_CASE("Adam with L2 (adam_w_mode false) folds decay into the gradient") {
  Tensor p = param({2.0}, {0.0});
  optim::Adam opt({{{"p"}, {p}, 0.1, 0.5}}, optim::AdamOptions{0.9, 0.999, 1e-8, false});
  opt.step();
  // g = 0 + 0.5 * 2 = 1; m = 0.1, v = 0.001; step = lr * (m/bc1) / (sqrt(v/bc2) + eps) = 0.1 * 1 /
  // (1 + 1e-8)
  CHECK(p.item() == doctest::Approx(2.0 - 0.1 / (1 + 1e-8)).epsilon(1e-12));
}

TEST_CASE("SGD with momentum and Nesterov") {
  Tensor p = param({1.0}, {2.0});
  optim::SGD opt({{{"p"}, {p}, 0.1, 0.0}}, optim::SGDOptions{0.9, 0.0, true});
  opt.step();  // buf = 2; d = 2 + 0.9 * 2 = 3.8
  CHECK(p.item() == doctest::Approx(1.0 - 0.38));
  opt.step();  // buf = 0.9*2 + 2 = 3.8; d = 2 + 0.9*3.8 = 5.42
  CHECK(p.item() == doctest::Approx(0.62 - 0.542));
}

TEST_CASE("LAMB clamps the trust ratio, above and below, on every element") {
  // update = m_hat / (sqrt(v_hat) + eps) = 1/(1+1e-6) per element, so ||u|| = sqrt(2) u.
  const double u = 1.0 / (1 + 1e-6);
  for (const auto& [x0, clamp] : std::vector<std::pair<std::array<double, 2>, double>>{
           {{300.0, 400.0}, 10.0},     // ||p|| / ||u|| = 354 > max_coeff: clamped to 10
           {{0.003, 0.004}, 0.01}}) {  // 0.0035 < min_coeff: clamped to 0.01
    const double ratio = std::hypot(x0[0], x0[1]) / (std::sqrt(2.0) * u);
    REQUIRE((ratio > 10.0 || ratio < 0.01));  // the clamp must be what decides the step
    Tensor p = param({x0[0], x0[1]}, {1.0, -1.0});
    optim::Lamb opt({{{"p"}, {p}, 0.1, 0.0}}, optim::LambOptions{0.9, 0.999, 1e-6, 10.0, 0.01});
    opt.step();
    const auto got = p.to_vector();
    CHECK(got[0] == doctest::Approx(x0[0] - 0.1 * clamp * u).epsilon(1e-12));
    CHECK(got[1] == doctest::Approx(x0[1] + 0.1 * clamp * u).epsilon(1e-12));
  }
}

TEST_CASE("global-norm clipping") {
  Tensor a = param({0}, {3.0}), b = param({0}, {4.0});
  const double n = optim::clip_grad_norm({a, b}, 1.0);
  CHECK(n == doctest::Approx(5.0));
  CHECK(a.grad().item() == doctest::Approx(3.0 / (5.0 + 1e-6)));
  CHECK(optim::clip_grad_norm({a, b}, 10.0) ==
        doctest::Approx(1.0).epsilon(1e-5));  // under the limit: unchanged
}

TEST_CASE("default param groups: no decay for biases and norm weights") {
  Tensor w = zeros({2, 2}).requires_grad_(), b = zeros({2}).requires_grad_();
  const auto groups = optim::default_param_groups({{"w", &w}, {"b", &b}}, 0.1, 0.2);
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].names == std::vector<std::string>{"w"});
  CHECK(groups[0].weight_decay == 0.2);
  CHECK(groups[1].weight_decay == 0.0);
}

// Hand-derived values at a few steps; tests/optim/test_deepspeed_oracle.cpp replays whole
// trajectories recorded from DeepSpeed itself. lr(k) is DeepSpeed's get_lr() at
// last_batch_iteration i = k - 1, and at k = 0 what its constructor sets.
TEST_CASE("DeepSpeed schedules at hand-derived steps") {
  const optim::WarmupLR log_w(0.0, 1.0, 10);
  CHECK(log_w.lr(0) == 0.0);
  CHECK(log_w.lr(1) == 0.0);  // i = 0: log(1) = 0
  CHECK(log_w.lr(5) == doctest::Approx(std::log(5.0) / std::log(10.0)));
  CHECK(log_w.lr(11) == 1.0);
  const optim::WarmupLR lin(0.0, 1.0, 10, optim::WarmupType::Linear);
  CHECK(lin.lr(6) == doctest::Approx(0.5));
  const optim::WarmupDecayLR decay(20, 0.0, 1.0, 10, optim::WarmupType::Linear);
  CHECK(decay.lr(16) == doctest::Approx(0.5));  // i = 15: (20 - 15) / (20 - 10)
  CHECK(decay.lr(26) == 0.0);
  const optim::WarmupCosineLR cos(1e-3, 2000, 0.0, 100, 0.1, optim::WarmupType::Linear);
  CHECK(cos.lr(0) == 0.0);  // DeepSpeed's constructor leaves lr 0
  CHECK(cos.lr(51) == doctest::Approx(0.5e-3));
  CHECK(cos.lr(2000) == doctest::Approx(1e-4));  // i = 1999: the end of the cosine
  CHECK(cos.lr(1050) == doctest::Approx(1e-3 * (0.1 + 0.9 * 0.5)));  // half-way down
  optim::OneCycleOptions o;
  o.cycle_min_lr = 0.1;
  o.cycle_max_lr = 1.0;
  o.decay_lr_rate = 0.5;
  o.cycle_first_step_size = 10;
  o.cycle_second_step_size = 10;
  o.decay_step_size = 5;
  o.cycle_min_mom = 0.8;
  o.cycle_max_mom = 0.9;
  const optim::OneCycle one(o);
  CHECK(one.lr(5) == doctest::Approx(0.55));
  CHECK(one.lr(10) == doctest::Approx(1.0));
  CHECK(one.lr(15) == doctest::Approx(0.55));
  CHECK(one.lr(25) == doctest::Approx(0.1 / (1 + 0.5 * 1)));  // decay divides: i = 24, t = 5
  CHECK(one.betas(0)->first == 0.8);                          // the constructor's value
  CHECK(one.betas(10)->first == doctest::Approx(0.8));        // lr at its peak, beta1 lowest
  CHECK(one.betas(15)->first == doctest::Approx(0.85));
  CHECK(one.betas(15)->second == 0.99);
  const optim::LRRangeTest range(0.01, 10, 1.0, true);
  CHECK(range.lr(9) == doctest::Approx(0.01));
  CHECK(range.lr(10) == doctest::Approx(0.02));
}

TEST_CASE("dynamic loss scaler: ZeRO's hysteresis and window, stage 0's plain halving") {
  engine::LossScaler s(true, 1024, 3, 2, false, 1, engine::LossScaleRule::ZeroDynamic);
  s.update(true);  // first overflow: hysteresis 2 -> 1, scale kept
  CHECK(s.scale() == 1024);
  s.update(true);  // second: halves (iteration 1 is the last overflow)
  CHECK(s.scale() == 512);
  s.update(false);  // iterations 2..4: 0, 1, 2 clean steps before them
  s.update(false);
  s.update(false);
  CHECK(s.scale() == 512);
  s.update(false);  // iteration 5: 3 clean steps before it, a full window: doubles
  CHECK(s.scale() == 1024);

  engine::LossScaler z(true, 2, 10, 1, false, 1, engine::LossScaleRule::ZeroDynamic);
  z.update(true);
  CHECK(z.scale() == 1);
  CHECK_THROWS_WITH_AS(z.update(true), doctest::Contains("minimum loss scale"), Error);

  engine::LossScaler f(true, 1024, 3, 2, false, 1, engine::LossScaleRule::FusedOptimizer);
  f.update(true);  // no hysteresis at stage 0
  CHECK(f.scale() == 512);
  for (int i = 0; i < 12; ++i) f.update(true);
  CHECK(f.scale() == 1);  // stays at the minimum, no error
}

TEST_CASE("Adam's bf16 model copies are their masters rounded as a cast rounds them") {
  // The fused step writes the copies with its own vectorised rounding: ties to even, the
  // largest floats to infinity, subnormals, signed zeros and NaNs as the cast gives them.
  const auto f = [](uint32_t bits) { return static_cast<double>(std::bit_cast<float>(bits)); };
  std::vector<double> values = {f(0x3f808000u),
                                f(0x3f818000u),
                                f(0x3f80ffffu),
                                f(0xbf808001u),
                                f(0x7f7fffffu),
                                f(0xff7fffffu),
                                f(0x00000001u),
                                f(0x80400000u),
                                0.0,
                                -0.0,
                                INFINITY,
                                -INFINITY,
                                NAN,
                                -NAN,
                                1e-40,
                                3.14159265};
  Generator gen(5);
  const std::vector<double> random = randn({4096}, DType::Float64, Device::cpu(), &gen).to_vector();
  for (double r : random) values.push_back(r * 1e3);
  const auto n = static_cast<int64_t>(values.size());
  Tensor master = from_vector(values, {n}, DType::Float32);
  Tensor copy = zeros({n}, DType::BFloat16);
  copy.set_grad(zeros({n}, DType::BFloat16));
  optim::Adam opt({{{"p"}, {master}, 0.0, 0.0}});  // lr 0: the master stays (0 * inf aside)
  opt.set_model_copies({{&copy}});
  opt.step();
  const std::vector<double> got = copy.to(DType::Float32).to_vector(),
                            w = master.to(DType::BFloat16).to(DType::Float32).to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    CAPTURE(values[i]);
    CHECK(std::signbit(got[i]) == std::signbit(w[i]));
    if (std::isnan(w[i]))
      CHECK(std::isnan(got[i]));
    else
      CHECK(got[i] == w[i]);
  }
}
