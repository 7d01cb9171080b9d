// Learning-rate schedules with DeepSpeed's names, parameters and formulas
// (deepspeed/runtime/lr_schedules.py), checked against DeepSpeed itself by
// tests/fixtures/generate_deepspeed_fixtures.py.
//
// lr(k) is the rate DeepSpeed's engine gives optimizer step k (k = 0, 1, ...): the engine
// steps its scheduler after each applied optimizer step, so step 0 runs with the value the
// scheduler's constructor leaves, and step k with DeepSpeed's get_lr() at
// last_batch_iteration = k - 1. (Skipped fp16 steps do not advance k.)
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace tessera::optim {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double lr(int64_t step) const = 0;
  // Adam/LAMB's (beta1, beta2) for step k when the schedule cycles momentum (OneCycle).
  virtual std::optional<std::pair<double, double>> betas(int64_t) const { return std::nullopt; }
  virtual std::string name() const = 0;
};

enum class WarmupType { Log, Linear };

// min + (max - min) * gamma; gamma = log(i+1)/log(W) ("log") or i/W ("linear") for
// last_batch_iteration i < W, then 1; W = max(2, warmup_num_steps).
class WarmupLR : public LRSchedule {
 public:
  WarmupLR(double min_lr, double max_lr, int64_t warmup_num_steps,
           WarmupType type = WarmupType::Log);
  double lr(int64_t step) const override;
  std::string name() const override { return "WarmupLR"; }

 protected:
  virtual double gamma(int64_t iteration) const;
  double warmup_gamma(int64_t iteration) const;
  double min_lr_, max_lr_;
  int64_t warmup_;
  WarmupType type_;
};

// WarmupLR, then linear decay to 0 at total_num_steps.
class WarmupDecayLR : public WarmupLR {
 public:
  WarmupDecayLR(int64_t total_num_steps, double min_lr, double max_lr, int64_t warmup_num_steps,
                WarmupType type = WarmupType::Log);
  std::string name() const override { return "WarmupDecayLR"; }

 private:
  double gamma(int64_t iteration) const override;
  int64_t total_;
};

// Ratios of the optimizer's base lr: 0 before the first scheduler step (DeepSpeed's
// constructor value), warm up from warmup_min_ratio to 1, then cosine from 1 to
// cos_min_ratio at total_num_steps (which may be <= warmup_num_steps: no decay window).
class WarmupCosineLR : public LRSchedule {
 public:
  WarmupCosineLR(double base_lr, int64_t total_num_steps, double warmup_min_ratio,
                 int64_t warmup_num_steps, double cos_min_ratio, WarmupType type = WarmupType::Log);
  double lr(int64_t step) const override;
  std::string name() const override { return "WarmupCosineLR"; }

 private:
  double base_, warmup_min_ratio_, cos_min_ratio_;
  int64_t total_, warmup_;
  WarmupType type_;
};

struct OneCycleOptions {
  double cycle_min_lr = 0.0, cycle_max_lr = 0.0;
  double decay_lr_rate = 0.0;
  int64_t cycle_first_step_size = 2000;
  int64_t cycle_second_step_size = -1;    // -1: cycle_first_step_size
  int64_t cycle_first_stair_count = 0;    // 0: no stairs
  int64_t cycle_second_stair_count = -1;  // -1: cycle_first_stair_count
  int64_t decay_step_size = 0;            // 0: no decay after the cycle
  bool cycle_momentum = true;             // beta1 cycled inversely to the lr (beta2 = 0.99)
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9;
  double decay_mom_rate = 0.0;
};

// Triangular cycle from cycle_min_lr up to cycle_max_lr (first step size) and back (second),
// optionally in stairs, then decay: min_lr / (1 + decay_lr_rate * t / decay_step_size).
// With cycle_momentum, beta1 goes the opposite way between cycle_max_mom and cycle_min_mom
// and grows by (1 + decay_mom_rate * t / decay_step_size) after the cycle, as DeepSpeed's.
class OneCycle : public LRSchedule {
 public:
  explicit OneCycle(const OneCycleOptions& options);
  double lr(int64_t step) const override;
  std::optional<std::pair<double, double>> betas(int64_t step) const override;
  std::string name() const override { return "OneCycle"; }

 private:
  double scale_factor(int64_t iteration) const;
  OneCycleOptions o_;
  double first_, second_, total_size_, step_ratio_;
  int64_t second_stairs_;
};

// min_lr * (1 + step_rate * (i + 1) / step_size) at last_batch_iteration i, the quotient
// floored when staircase.
class LRRangeTest : public LRSchedule {
 public:
  LRRangeTest(double min_lr, int64_t step_size, double step_rate, bool staircase);
  double lr(int64_t step) const override;
  std::string name() const override { return "LRRangeTest"; }

 private:
  double min_lr_, step_rate_;
  int64_t step_size_;
  bool staircase_;
};

class ConstantLR : public LRSchedule {
 public:
  explicit ConstantLR(double lr) : lr_(lr) {}
  double lr(int64_t) const override { return lr_; }
  std::string name() const override { return "constant"; }

 private:
  double lr_;
};

}  // namespace tessera::optim
