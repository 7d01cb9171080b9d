#include "tessera/engine/loss_scaler.h"

#include <algorithm>

#include "tessera/error.h"

namespace tessera::engine {

LossScaler::LossScaler(bool dynamic, double initial_scale, int64_t window, int64_t hysteresis,
                       bool consecutive_hysteresis, double min_scale, LossScaleRule rule)
    : dynamic_(dynamic),
      rule_(rule),
      scale_(initial_scale),
      window_(window),
      hysteresis_(hysteresis),
      consecutive_(consecutive_hysteresis),
      min_scale_(min_scale),
      cur_hysteresis_(hysteresis) {}

void LossScaler::update(bool overflow) {
  if (!dynamic_) return;
  const bool zero = rule_ == LossScaleRule::ZeroDynamic;
  if (overflow) {
    if (!zero || hysteresis_ == 1 || cur_hysteresis_ == 1) {
      TS_CHECK(!zero || scale_ != min_scale_,
               "fp16: the gradients overflowed at the minimum "
               "loss scale (fp16.min_loss_scale = ",
               min_scale_,
               "); the scale cannot shrink further and the run stops, as DeepSpeed's does. "
               "Check the data and the learning rate, or train in bf16");
      scale_ = std::max(scale_ / 2, min_scale_);
    } else {
      --cur_hysteresis_;
    }
    last_overflow_iter_ = cur_iter_;
  } else {
    if (zero && consecutive_) cur_hysteresis_ = hysteresis_;
    // Clean steps since the last overflow, not counting the one that just finished.
    const int64_t stable = cur_iter_ - last_overflow_iter_ - 1;
    if (stable > 0 && stable % window_ == 0) {
      if (zero && !consecutive_) cur_hysteresis_ = hysteresis_;
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
