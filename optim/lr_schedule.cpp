// Each schedule is written in DeepSpeed's terms, as a function of last_batch_iteration i
// (how many times the scheduler has been stepped, minus one); lr(k) evaluates it at i = k - 1.
#include "tessera/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "tessera/error.h"

namespace tessera::optim {

namespace {
constexpr double kPi = 3.14159265358979323846;

// DeepSpeed's warm-up fraction: inverse_log_warm_up * log(i + 1), or i / W.
double warmup_fraction(int64_t i, int64_t warmup, WarmupType type) {
  if (type == WarmupType::Log)
    return (1.0 / std::log(static_cast<double>(warmup))) * std::log(static_cast<double>(i + 1));
  return static_cast<double>(i) / static_cast<double>(warmup);
}
}  // namespace

WarmupLR::WarmupLR(double min_lr, double max_lr, int64_t warmup_num_steps, WarmupType type)
    : min_lr_(min_lr),
      max_lr_(max_lr),
      warmup_(std::max<int64_t>(2, warmup_num_steps)),
      type_(type) {
  TS_CHECK(warmup_num_steps > 0, "WarmupLR: warmup_num_steps must be a positive integer, got ",
           warmup_num_steps);
}

double WarmupLR::warmup_gamma(int64_t i) const {
  return warmup_fraction(i, warmup_, type_);
}

double WarmupLR::gamma(int64_t i) const {
  return i < warmup_ ? warmup_gamma(i) : 1.0;
}

double WarmupLR::lr(int64_t step) const {
  const int64_t i = step - 1;
  if (i < 0) return min_lr_;  // DeepSpeed: "before it has started"
  return min_lr_ + (max_lr_ - min_lr_) * gamma(i);
}

WarmupDecayLR::WarmupDecayLR(int64_t total, double min_lr, double max_lr, int64_t warmup,
                             WarmupType type)
    : WarmupLR(min_lr, max_lr, warmup, type), total_(total) {}

double WarmupDecayLR::gamma(int64_t i) const {
  if (i < warmup_) return warmup_gamma(i);
  return std::max(
      0.0, static_cast<double>(total_ - i) / std::max(1.0, static_cast<double>(total_ - warmup_)));
}

WarmupCosineLR::WarmupCosineLR(double base_lr, int64_t total, double warmup_min_ratio,
                               int64_t warmup, double cos_min_ratio, WarmupType type)
    : base_(base_lr),
      warmup_min_ratio_(warmup_min_ratio),
      cos_min_ratio_(cos_min_ratio),
      total_(total),
      warmup_(std::max<int64_t>(2, warmup)),
      type_(type) {
  TS_CHECK(warmup > 0, "WarmupCosineLR: warmup_num_steps must be a positive integer, got ", warmup);
}

double WarmupCosineLR::lr(int64_t step) const {
  const int64_t i = step - 1;
  if (i < 0) return 0.0;  // DeepSpeed's constructor value
  double ratio;
  if (i < warmup_) {
    ratio = warmup_min_ratio_ + warmup_fraction(i, warmup_, type_) * (1.0 - warmup_min_ratio_);
  } else {
    const double done = static_cast<double>(i - warmup_ + 1);
    const double span = static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
    const double c = (1 + std::cos(kPi * std::min(1.0, done / span))) / 2;
    ratio = std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * c);
  }
  return base_ * ratio;
}

OneCycle::OneCycle(const OneCycleOptions& o) : o_(o) {
  TS_CHECK(o.cycle_first_step_size > 0, "OneCycle: cycle_first_step_size must be > 0, got ",
           o.cycle_first_step_size);
  first_ = static_cast<double>(o.cycle_first_step_size);
  second_ = o.cycle_second_step_size >= 0 ? static_cast<double>(o.cycle_second_step_size) : first_;
  total_size_ = first_ + second_;
  step_ratio_ = first_ / total_size_;
  second_stairs_ =
      o.cycle_second_stair_count >= 0 ? o.cycle_second_stair_count : o.cycle_first_stair_count;
}

double OneCycle::scale_factor(int64_t i) const {
  const double it = static_cast<double>(i + 1);
  const double cycle = std::floor(1 + it / total_size_);
  const double x = 1.0 + it / total_size_ - cycle;
  double scale;
  int64_t stairs;
  if (x <= step_ratio_) {
    scale = x / step_ratio_;
    stairs = o_.cycle_first_stair_count;
  } else {
    scale = (x - 1) / (step_ratio_ - 1);
    stairs = second_stairs_;
  }
  if (stairs > 0) {
    const double pos_in_cycle = std::fmod(it, total_size_);
    const double stair = pos_in_cycle <= first_
                             ? pos_in_cycle * static_cast<double>(stairs) / first_
                             : (total_size_ - pos_in_cycle) * static_cast<double>(stairs) / second_;
    scale = std::floor(stair) / static_cast<double>(stairs);
  }
  return scale;
}

double OneCycle::lr(int64_t step) const {
  const int64_t i = step - 1;
  if (static_cast<double>(i) < total_size_)
    return o_.cycle_min_lr + (o_.cycle_max_lr - o_.cycle_min_lr) * scale_factor(i);
  if (o_.decay_step_size == 0 || o_.decay_lr_rate == 0) return o_.cycle_min_lr;
  const double interval =
      (static_cast<double>(i) - total_size_ + 1) / static_cast<double>(o_.decay_step_size);
  return o_.cycle_min_lr / (1 + o_.decay_lr_rate * interval);
}

std::optional<std::pair<double, double>> OneCycle::betas(int64_t step) const {
  if (!o_.cycle_momentum) return std::nullopt;
  constexpr double kBeta2 = 0.99;  // DeepSpeed pairs every cycled beta1 with 0.99
  if (step == 0) return std::make_pair(o_.cycle_min_mom, kBeta2);  // the constructor's value
  const int64_t i = step - 1;
  if (static_cast<double>(i) < total_size_)
    return std::make_pair(
        o_.cycle_max_mom - (o_.cycle_max_mom - o_.cycle_min_mom) * scale_factor(i), kBeta2);
  if (o_.decay_step_size == 0 || o_.decay_mom_rate == 0)
    return std::make_pair(o_.cycle_max_mom, kBeta2);
  const double interval =
      (static_cast<double>(i) - total_size_ + 1) / static_cast<double>(o_.decay_step_size);
  return std::make_pair(o_.cycle_max_mom * (1 + o_.decay_mom_rate * interval), kBeta2);
}

LRRangeTest::LRRangeTest(double min_lr, int64_t step_size, double step_rate, bool staircase)
    : min_lr_(min_lr), step_rate_(step_rate), step_size_(step_size), staircase_(staircase) {
  TS_CHECK(step_size > 0, "LRRangeTest: lr_range_test_step_size must be > 0, got ", step_size);
}

double LRRangeTest::lr(int64_t step) const {
  // At last_batch_iteration i = step - 1 the quotient is (i + 1) / step_size = step / step_size.
  double interval = static_cast<double>(step) / static_cast<double>(step_size_);
  if (staircase_) interval = std::floor(interval);
  return min_lr_ * (1 + step_rate_ * interval);
}

}  // namespace tessera::optim
