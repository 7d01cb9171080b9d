#include "tessera/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "tessera/error.h"

namespace tessera::optim {

namespace {
constexpr double kPi = 3.14159265358979323846;
}

WarmupLR::WarmupLR(double min_lr, double max_lr, int64_t warmup_num_steps, WarmupType type)
    : min_lr_(min_lr),
      max_lr_(max_lr),
      warmup_(std::max<int64_t>(2, warmup_num_steps)),
      type_(type) {}

double WarmupLR::gamma_warmup(int64_t k) const {
  return type_ == WarmupType::Log
             ? std::log(static_cast<double>(k + 1)) / std::log(static_cast<double>(warmup_))
             : static_cast<double>(k) / static_cast<double>(warmup_);
}

double WarmupLR::lr(int64_t k) const {
  const double gamma = k < warmup_ ? gamma_warmup(k) : 1.0;
  return min_lr_ + (max_lr_ - min_lr_) * gamma;
}

WarmupDecayLR::WarmupDecayLR(int64_t total, double min_lr, double max_lr, int64_t warmup,
                             WarmupType type)
    : WarmupLR(min_lr, max_lr, warmup, type), total_(total) {
  TS_CHECK(total > 0, "WarmupDecayLR: total_num_steps must be > 0, got ", total);
}

double WarmupDecayLR::lr(int64_t k) const {
  const double gamma =
      k < warmup_ ? gamma_warmup(k)
                  : std::max(0.0, static_cast<double>(total_ - k) /
                                      std::max(1.0, static_cast<double>(total_ - warmup_)));
  return min_lr_ + (max_lr_ - min_lr_) * gamma;
}

WarmupCosineLR::WarmupCosineLR(double base_lr, int64_t total, double warmup_min_ratio,
                               int64_t warmup, double cos_min_ratio, WarmupType type)
    : base_(base_lr),
      warmup_min_ratio_(warmup_min_ratio),
      cos_min_ratio_(cos_min_ratio),
      total_(total),
      warmup_(std::max<int64_t>(2, warmup)),
      type_(type) {
  TS_CHECK(total > warmup_, "WarmupCosineLR: total_num_steps (", total,
           ") must exceed warmup_num_steps (", warmup_, ")");
}

double WarmupCosineLR::lr(int64_t k) const {
  double ratio;
  if (k < warmup_) {
    const double g =
        type_ == WarmupType::Log
            ? std::log(static_cast<double>(k + 1)) / std::log(static_cast<double>(warmup_))
            : static_cast<double>(k) / static_cast<double>(warmup_);
    ratio = warmup_min_ratio_ + g * (1.0 - warmup_min_ratio_);
  } else {
    const double done = static_cast<double>(k - warmup_ + 1),
                 span = static_cast<double>(total_ - warmup_);
    const double c = (1 + std::cos(kPi * std::min(1.0, done / span))) / 2;
    ratio = std::max(0.0, cos_min_ratio_ + (1.0 - cos_min_ratio_) * c);
  }
  return base_ * ratio;
}

OneCycle::OneCycle(double min_lr, double max_lr, double decay_rate, int64_t first, int64_t second,
                   int64_t decay_step)
    : min_lr_(min_lr), max_lr_(max_lr), decay_rate_(decay_rate), decay_step_size_(decay_step) {
  TS_CHECK(first > 0, "OneCycle: cycle_first_step_size must be > 0, got ", first);
  const double f = static_cast<double>(first), s = second > 0 ? static_cast<double>(second) : f;
  total_size_ = f + s;
  step_ratio_ = f / total_size_;
}

double OneCycle::lr(int64_t k) const {
  const double it = static_cast<double>(k);
  if (it <= total_size_) {
    const double cycle = std::floor(1 + it / total_size_);
    const double x = 1.0 + it / total_size_ - cycle;
    const double scale = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
    return min_lr_ + (max_lr_ - min_lr_) * scale;
  }
  if (decay_step_size_ <= 0) return min_lr_;
  return min_lr_ * (1 + decay_rate_ * (it - total_size_) / static_cast<double>(decay_step_size_));
}

LRRangeTest::LRRangeTest(double min_lr, int64_t step_size, double step_rate, bool staircase)
    : min_lr_(min_lr), step_rate_(step_rate), step_size_(step_size), staircase_(staircase) {
  TS_CHECK(step_size > 0, "LRRangeTest: lr_range_test_step_size must be > 0, got ", step_size);
}

double LRRangeTest::lr(int64_t k) const {
  double interval = static_cast<double>(k + 1) / static_cast<double>(step_size_);
  if (staircase_) interval = std::floor(interval);
  return min_lr_ * (1 + step_rate_ * interval);
}

}  // namespace tessera::optim
