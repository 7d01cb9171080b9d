// An LR schedule of one's own through the LR schedule registry: one class and one
// register_lr_schedule call, and the config reader checks its section (kinds, required
// parameters, unknown keys), the engine builds it with the entry's defaults, and errors name
// the key. (The built-in schedules against DeepSpeed's: tests/optim/test_deepspeed_oracle.cpp.)
#include <doctest/doctest.h>

#include <cmath>

#include "tessera/engine/engine.h"
#include "tessera/optim/lr_schedule_registry.h"

using namespace tessera;

namespace {

// lr(k) = base * gamma^k: an exponential decay, as torch's ExponentialLR.
class ExponentialLR : public optim::LRSchedule {
 public:
  ExponentialLR(double base, double gamma) : base_(base), gamma_(gamma) {}
  double lr(int64_t step) const override { return base_ * std::pow(gamma_, step); }
  std::string name() const override { return "ExponentialLR"; }

 private:
  double base_, gamma_;
};

optim::LRScheduleEntry exponential_entry() {
  using K = optim::HyperParamKind;
  return {"ExponentialLR",
          "the optimizer's lr times gamma at every step",
          {{"gamma", K::Rate, {}, "the factor per step", true},
           {"lr", K::Lr, {}, "the first lr (default: the optimizer's)"}},
          false,
          [](const optim::HyperParamValues& v, const optim::ScheduleContext& c, optim::WarmupType) {
            return std::make_unique<ExponentialLR>(v.number("lr", c.optimizer_lr),
                                                   v.number("gamma"));
          }};
}

io::TrainConfig config(const std::string& scheduler) {
  return io::TrainConfig::parse(R"({"train_batch_size": 1, "optimizer": {"type": "SGD",
      "params": {"lr": 0.5}}, "scheduler": )" +
                                    scheduler + "}",
                                1, "cfg.json");
}

}  // namespace

TEST_CASE("a registered LR schedule is read, checked and built from a config") {
  if (!optim::has_lr_schedule("ExponentialLR")) optim::register_lr_schedule(exponential_entry());
  CHECK_THROWS_WITH_AS(optim::register_lr_schedule(exponential_entry()),
                       doctest::Contains("'ExponentialLR' is registered twice"), Error);
  const auto types = optim::registered_lr_schedules();
  CHECK(types.front() == "WarmupLR");
  CHECK(types.back() == "ExponentialLR");

  auto schedule = engine::make_schedule(config(R"({"type": "ExponentialLR",
      "params": {"gamma": 0.5}})"));
  CHECK(schedule->name() == "ExponentialLR");
  CHECK(schedule->lr(0) == 0.5);  // the optimizer's lr: the context's default
  CHECK(schedule->lr(3) == 0.0625);
  schedule = engine::make_schedule(
      config(R"({"type": "ExponentialLR", "params": {"gamma": 0.5, "lr": 2}})"));
  CHECK(schedule->lr(1) == 1.0);

  CHECK_THROWS_WITH_AS(config(R"({"type": "ExponentialLR", "params": {}})"),
                       doctest::Contains("cfg.json: 'scheduler.params.gamma' is required by "
                                         "ExponentialLR"),
                       Error);
  CHECK_THROWS_WITH_AS(config(R"({"type": "ExponentialLR", "params": {"gamma": -1}})"),
                       doctest::Contains("'scheduler.params.gamma'"), Error);
  const auto unknown = config(R"({"type": "ExponentialLR", "params": {"gamma": 0.5,
      "gama": 1}})");
  CHECK(unknown.unknown_keys.size() == 1);
  CHECK_THROWS_WITH_AS(config(R"({"type": "Exponential"})"),
                       doctest::Contains("'scheduler.type' is \"Exponential\", expected one of "
                                         "WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, "
                                         "LRRangeTest, ExponentialLR"),
                       Error);
}

TEST_CASE("the built-in schedules' defaults are DeepSpeed's, written once in the registry") {
  // deepspeed/runtime/lr_schedules.py's constructor defaults.
  const auto& w = optim::find_lr_schedule("WarmupLR");
  CHECK(w.find("warmup_num_steps")->default_value == std::vector<double>{1000});
  CHECK(w.find("warmup_min_lr")->default_value == std::vector<double>{0});
  CHECK(w.find("warmup_max_lr")->default_value.empty());  // the optimizer's lr
  CHECK(optim::find_lr_schedule("WarmupDecayLR").find("warmup_max_lr")->default_value ==
        std::vector<double>{0.001});
  CHECK(optim::find_lr_schedule("WarmupCosineLR").find("cos_min_ratio")->default_value ==
        std::vector<double>{0.0001});
  const auto& one = optim::find_lr_schedule("OneCycle");
  CHECK(one.find("cycle_first_step_size")->default_value == std::vector<double>{2000});
  CHECK(one.find("cycle_min_mom")->default_value == std::vector<double>{0.8});
  CHECK(one.find("cycle_max_mom")->default_value == std::vector<double>{0.9});
  CHECK(one.find("cycle_min_lr")->required);
  const auto& range = optim::find_lr_schedule("LRRangeTest");
  CHECK(range.find("lr_range_test_min_lr")->default_value == std::vector<double>{1e-3});
  CHECK(range.find("lr_range_test_step_size")->default_value == std::vector<double>{2000});
  // A section without warmup_num_steps warms up over the default's 1000 steps: step k runs at
  // DeepSpeed's get_lr() at last_batch_iteration k - 1, linear: (k - 1) / 1000 of the way.
  const auto s = engine::make_schedule(io::TrainConfig::parse(
      R"({"train_batch_size": 1, "scheduler": {"type": "WarmupLR",
          "params": {"warmup_max_lr": 1.0, "warmup_type": "linear"}}})",
      1, "c"));
  CHECK(s->lr(501) == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(s->lr(1000) == doctest::Approx(0.999).epsilon(1e-12));
  CHECK(s->lr(1001) == 1.0);
}
