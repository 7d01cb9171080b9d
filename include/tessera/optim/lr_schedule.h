// Learning-rate schedules with DeepSpeed's names, parameters and formulas. lr(k) is the rate
// used by optimizer step k (k = 0, 1, ...), i.e. DeepSpeed's value at last_batch_iteration = k.
#pragma once
#include <memory>
#include <string>

namespace tessera::optim {

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  virtual double lr(int64_t step) const = 0;
  virtual std::string name() const = 0;
};

enum class WarmupType { Log, Linear };

// min + (max - min) * gamma; gamma = log(k+1)/log(W) ("log") or k/W ("linear") for k < W, then 1.
class WarmupLR : public LRSchedule {
 public:
  WarmupLR(double min_lr, double max_lr, int64_t warmup_num_steps,
           WarmupType type = WarmupType::Log);
  double lr(int64_t step) const override;
  std::string name() const override { return "WarmupLR"; }

 protected:
  double gamma_warmup(int64_t step) const;
  double min_lr_, max_lr_;
  int64_t warmup_;  // at least 2, as DeepSpeed
  WarmupType type_;
};

// WarmupLR, then linear decay to 0 at total_num_steps.
class WarmupDecayLR : public WarmupLR {
 public:
  WarmupDecayLR(int64_t total_num_steps, double min_lr, double max_lr, int64_t warmup_num_steps,
                WarmupType type = WarmupType::Log);
  double lr(int64_t step) const override;
  std::string name() const override { return "WarmupDecayLR"; }

 private:
  int64_t total_;
};

// Ratios of the optimizer's base lr: warm up from warmup_min_ratio to 1, then cosine from 1
// to cos_min_ratio at total_num_steps.
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

// Triangular cycle from cycle_min_lr up to cycle_max_lr (first_step_size steps) and back
// (second_step_size), then decay: min_lr * (1 + decay_lr_rate * (k - cycle) / decay_step_size).
class OneCycle : public LRSchedule {
 public:
  OneCycle(double cycle_min_lr, double cycle_max_lr, double decay_lr_rate, int64_t first_step_size,
           int64_t second_step_size, int64_t decay_step_size);
  double lr(int64_t step) const override;
  std::string name() const override { return "OneCycle"; }

 private:
  double min_lr_, max_lr_, decay_rate_, total_size_, step_ratio_;
  int64_t decay_step_size_;
};

// min_lr * (1 + step_rate * (k + 1) / step_size), floored per stair when staircase.
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
