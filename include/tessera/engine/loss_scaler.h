// fp16 loss scaling with DeepSpeed's DynamicLossScaler semantics: on overflow the step is
// skipped and the scale shrinks by 2 (after `hysteresis` overflows), never below
// min_loss_scale; after loss_scale_window clean steps it doubles.
#pragma once
#include <cstdint>

namespace tessera::engine {

class LossScaler {
 public:
  LossScaler() = default;  // static scale 1 (disabled)
  LossScaler(bool dynamic, double initial_scale, int64_t window, int64_t hysteresis,
             bool consecutive_hysteresis, double min_scale);
  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // Records the outcome of one step (after the gradients were checked for inf/NaN).
  void update(bool overflow);

  struct State {
    double scale;
    int64_t cur_iter, last_overflow_iter, cur_hysteresis;
  };
  State state() const { return {scale_, cur_iter_, last_overflow_iter_, cur_hysteresis_}; }
  void set_state(const State& s);

 private:
  bool dynamic_ = false;
  double scale_ = 1.0;
  int64_t window_ = 1000, hysteresis_ = 2;
  bool consecutive_ = false;
  double min_scale_ = 1.0;
  int64_t cur_iter_ = 0, last_overflow_iter_ = -1, cur_hysteresis_ = 2;
};

}  // namespace tessera::engine
