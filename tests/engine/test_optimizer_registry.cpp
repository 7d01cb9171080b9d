// An optimizer of one's own through the optimizer registry: one class and one
// register_optimizer call, and the config reader checks its section (kinds, required
// parameters, unknown keys), the engine builds it with the entry's defaults and trains with
// it, the memory estimate reads its state size; the built-in entries' defaults are DeepSpeed's
// and their new key, bias_correction, gives the hand-derived update. (The built-in
// optimizers' updates against torch: tests/optim/test_optimizers.cpp.)
#include <doctest/doctest.h>

#include <cmath>

#include "regressor.h"
#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/optim/optimizer_registry.h"

using namespace tessera;

namespace {

// p -= lr * scale * g (scale is this optimizer's own parameter): a plain-SGD variant whose
// update a test derives by hand.
class ScaledSGD : public optim::Optimizer {
 public:
  ScaledSGD(std::vector<optim::ParamGroup> groups, double scale)
      : Optimizer(std::move(groups)), scale_(scale) {
    TS_CHECK(scale > 0, "ScaledSGD: scale must be > 0, got ", scale);
  }
  void step() override {
    NoGradGuard no_grad;
    ++step_;
    for (auto& g : groups_)
      for (Tensor& p : g.params)
        if (p.grad().defined()) p.add_(p.grad(), -g.lr * scale_ * grad_scale_);
  }
  std::string name() const override { return "ScaledSGD"; }
  std::unique_ptr<Optimizer> rebuild(std::vector<optim::ParamGroup> groups) const override {
    return std::make_unique<ScaledSGD>(std::move(groups), scale_);
  }

 private:
  double scale_;
};

optim::OptimizerEntry scaled_sgd_entry() {
  using K = optim::HyperParamKind;
  optim::OptimizerEntry e;
  e.type = "ScaledSGD";
  e.doc = "SGD with its step scaled";
  e.params = {{"scale", K::Positive, {}, "the step's factor", true}};
  e.state_slots = [](const optim::HyperParamValues&) { return int64_t{0}; };
  e.build = [](std::vector<optim::ParamGroup> groups, const optim::HyperParamValues& v) {
    return std::unique_ptr<optim::Optimizer>(
        std::make_unique<ScaledSGD>(std::move(groups), v.number("scale")));
  };
  return e;
}

io::TrainConfig optimizer_config(const std::string& optimizer) {
  return io::TrainConfig::parse(
      R"({"train_batch_size": 4, "gradient_clipping": 0, "optimizer": )" + optimizer + "}", 1,
      "cfg.json");
}

// One engine step of the regressor on 4 rows; returns the weights before and after and the
// float64 gradients.
struct OneStep {
  std::vector<double> before, after, grads;
};
OneStep one_step(const io::TrainConfig& cfg) {
  test::Regressor m;
  auto e = engine::initialize(m, cfg);
  const test::Rows rows = test::make_rows(4, 7);
  OneStep s;
  for (const Tensor* t : {&m.fc.weight, &m.fc.bias})
    for (double v : t->to_vector()) s.before.push_back(v);
  s.grads = test::regressor_grads(m, rows);
  e->backward(e->forward(rows));
  e->step();
  for (const Tensor* t : {&m.fc.weight, &m.fc.bias})
    for (double v : t->to_vector()) s.after.push_back(v);
  return s;
}

}  // namespace

TEST_CASE("a registered optimizer is read, checked, built from a config and trains") {
  if (!optim::has_optimizer("ScaledSGD")) optim::register_optimizer(scaled_sgd_entry());
  CHECK_THROWS_WITH_AS(optim::register_optimizer(scaled_sgd_entry()),
                       doctest::Contains("'ScaledSGD' is registered twice"), Error);
  CHECK(optim::registered_optimizers().back() == "ScaledSGD");
  // Registering added the parameter groups' keys with their defaults.
  const optim::OptimizerEntry& entry = optim::find_optimizer("ScaledSGD");
  REQUIRE(entry.find("lr"));
  CHECK(entry.find("lr")->default_value == std::vector<double>{1e-3});
  CHECK(entry.find("weight_decay_1d"));

  const auto cfg =
      optimizer_config(R"({"type": "ScaledSGD", "params": {"lr": 0.25, "scale": 0.5}})");
  CHECK(engine::make_optimizer(cfg, {})->name() == "ScaledSGD");
  const OneStep s = one_step(cfg);
  for (size_t i = 0; i < 4; ++i)
    CHECK(s.after[i] == doctest::Approx(s.before[i] - 0.125 * s.grads[i]).epsilon(1e-6));

  CHECK_THROWS_WITH_AS(optimizer_config(R"({"type": "ScaledSGD", "params": {"lr": 0.1}})"),
                       doctest::Contains("cfg.json: 'optimizer.params.scale' is required by "
                                         "ScaledSGD"),
                       Error);
  CHECK_THROWS_WITH_AS(optimizer_config(R"({"type": "ScaledSGD", "params": {"scale": 0}})"),
                       doctest::Contains("'optimizer.params.scale' is 0, expected > 0"), Error);
  const auto unknown =
      optimizer_config(R"({"type": "ScaledSGD", "params": {"scale": 1, "scal": 2}})");
  REQUIRE(unknown.unknown_keys.size() == 1);
  CHECK(unknown.unknown_keys[0].find("did you mean 'optimizer.params.scale'") != std::string::npos);
  CHECK_THROWS_WITH_AS(
      optimizer_config(R"({"type": "Adagrad"})"),
      doctest::Contains("'optimizer.type' is \"Adagrad\", expected one of Adam, "
                        "AdamW, SGD, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb, ScaledSGD"),
      Error);
}

TEST_CASE("the built-in optimizers' defaults are DeepSpeed's, written once in the registry") {
  // deepspeed/ops/adam/fused_adam.py: FusedAdam(lr=1e-3, bias_correction=True,
  // betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True, weight_decay=0.);
  // deepspeed/ops/lamb/fused_lamb.py: FusedLamb(lr=1e-3, bias_correction=True,
  // betas=(0.9, 0.999), eps=1e-8, weight_decay=0., max_coeff=10.0, min_coeff=0.01);
  // torch.optim.SGD(momentum=0, dampening=0, weight_decay=0, nesterov=False).
  auto def = [](const char* type, const char* name) {
    return optim::find_optimizer(type).find(name)->default_value;
  };
  using V = std::vector<double>;
  for (const char* t : {"Adam", "AdamW", "Lamb"}) {
    INFO(t);
    CHECK(def(t, "lr") == V{1e-3});
    CHECK(def(t, "betas") == V{0.9, 0.999});
    CHECK(def(t, "eps") == V{1e-8});
    CHECK(def(t, "weight_decay") == V{0.0});
    CHECK(def(t, "bias_correction") == V{1.0});
  }
  CHECK(def("Adam", "adam_w_mode") == V{1.0});
  CHECK(def("Lamb", "max_coeff") == V{10.0});
  CHECK(def("Lamb", "min_coeff") == V{0.01});
  CHECK(def("SGD", "momentum") == V{0.0});
  CHECK(def("SGD", "dampening") == V{0.0});
  CHECK(def("SGD", "nesterov") == V{0.0});
  CHECK_FALSE(optim::find_optimizer("SGD").has_betas);
  CHECK_FALSE(optim::find_optimizer("Lamb").updates_partitions);
  // Optimizer state per parameter, as the memory estimate counts it.
  CHECK(optim::find_optimizer("Adam").state_slots({"optimizer", "Adam", {}, {}}) == 2);
  const auto& sgd = optim::find_optimizer("SGD");
  CHECK(sgd.state_slots(sgd.values()) == 0);
  CHECK(sgd.state_slots(sgd.values({{"momentum", {0.9}}})) == 1);
}

TEST_CASE("optimizer sections: bias_correction, keys of another type, checks at read time") {
  // Adam without bias correction (DeepSpeed's bias_correction: false): the first step is
  // p -= lr * m / (sqrt(v) + eps) with m = (1 - b1) g, v = (1 - b2) g^2 (float64 here).
  const OneStep s = one_step(optimizer_config(R"({"type": "Adam", "params": {"lr": 0.01,
      "betas": [0.8, 0.9], "bias_correction": false}})"));
  for (size_t i = 0; i < 4; ++i) {
    const double g = s.grads[i], m = 0.2 * g, v = 0.1 * g * g;
    CHECK(s.after[i] ==
          doctest::Approx(s.before[i] - 0.01 * m / (std::sqrt(v) + 1e-8)).epsilon(1e-6));
  }
  // A key that belongs to another type is unknown to this one (it had no effect before).
  const auto adam = optimizer_config(R"({"type": "Adam", "params": {"momentum": 0.9}})");
  REQUIRE(adam.unknown_keys.size() == 1);
  CHECK(adam.unknown_keys[0].find("'optimizer.params.momentum'") != std::string::npos);
  // The optimizer's own checks of its options together speak when the config is read.
  CHECK_THROWS_WITH_AS(optimizer_config(R"({"type": "SGD", "params": {"nesterov": true}})"),
                       doctest::Contains("cfg.json: 'optimizer.params': SGD: nesterov needs "
                                         "momentum > 0 and dampening 0"),
                       Error);
  CHECK_THROWS_WITH_AS(
      optimizer_config(R"({"type": "Lamb", "params": {"max_coeff": 0.1, "min_coeff": 0.5}})"),
      doctest::Contains("Lamb: need 0 <= min_coeff <= max_coeff"), Error);
  CHECK_THROWS_WITH_AS(optimizer_config(R"({"type": "Lamb", "params": {"eps": 0}})"),
                       doctest::Contains("'optimizer.params.eps' is 0, expected > 0"), Error);
  // torch_adam is DeepSpeed's choice of kernel: read, checked, warned about as without effect.
  const auto torch_adam = optimizer_config(R"({"type": "AdamW", "params": {"torch_adam": true}})");
  bool warned = false;
  for (const auto& w : torch_adam.warnings)
    warned |= w.find("'optimizer.params.torch_adam' has no effect") != std::string::npos;
  CHECK(warned);
}
