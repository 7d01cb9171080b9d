#include "tessera/engine/loss_scaler.h"

#include <algorithm>

namespace tessera::engine {

LossScaler::LossScaler(bool dynamic, double initial_scale, int64_t window, int64_t hysteresis,
                       bool consecutive_hysteresis, double min_scale)
    : dynamic_(dynamic),
      scale_(initial_scale),
      window_(window),
      hysteresis_(hysteresis),
      consecutive_(consecutive_hysteresis),
      min_scale_(min_scale),
      cur_hysteresis_(hysteresis) {}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  if (overflow) {
    if (hysteresis_ == 1 || cur_hysteresis_ == 1)
      scale_ = std::max(scale_ / 2, min_scale_);
    else
      --cur_hysteresis_;
    last_overflow_iter_ = cur_iter_;
  } else {
    if (consecutive_) cur_hysteresis_ = hysteresis_;
    if ((cur_iter_ - last_overflow_iter_) % window_ == 0) {
      if (!consecutive_) cur_hysteresis_ = hysteresis_;
      scale_ *= 2;
    }
  }
  ++cur_iter_;
}

void LossScaler::set_state(const State& s) {
  scale_ = s.scale;
  cur_iter_ = s.cur_iter;
  last_overflow_iter_ = s.last_overflow_iter;
  cur_hysteresis_ = s.cur_hysteresis;
}

}  // namespace tessera::engine
