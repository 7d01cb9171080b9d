// fp16 loss scaling as DeepSpeed does it, checked against DeepSpeed's own classes
// (tests/fixtures/generate_deepspeed_fixtures.py). On an overflow the step is skipped and the
// scale halves (never below min_loss_scale); after loss_scale_window clean steps since the
// last overflow it doubles. Two rules, as in DeepSpeed:
//  - ZeRO stages 1-3 (DynamicLossScaler): the scale halves only after `hysteresis` overflows,
//    and an overflow at the minimum scale ends the run (update() throws).
//  - stage 0 (FP16_Optimizer): no hysteresis; at the minimum scale it stays there.
#pragma once
#include <cstdint>

namespace tessera::engine {

enum class LossScaleRule { ZeroDynamic, FusedOptimizer };

class LossScaler {
 public:
  LossScaler() = default;  // static scale 1 (disabled)
  LossScaler(bool dynamic, double initial_scale, int64_t window, int64_t hysteresis,
             bool consecutive_hysteresis, double min_scale,
             LossScaleRule rule = LossScaleRule::ZeroDynamic);
  double scale() const { return scale_; }
  bool dynamic() const { return dynamic_; }
  // Records the outcome of one step (after the gradients were checked for inf/NaN). Under the
  // ZeRO rule an overflow at the minimum scale throws, as DeepSpeed ends the run there.
  void update(bool overflow);

  struct State {
    double scale;
    int64_t cur_iter, last_overflow_iter, cur_hysteresis;
  };
  State state() const { return {scale_, cur_iter_, last_overflow_iter_, cur_hysteresis_}; }
  void set_state(const State& s);

 private:
  bool dynamic_ = false;
  LossScaleRule rule_ = LossScaleRule::ZeroDynamic;
  double scale_ = 1.0;
  int64_t window_ = 1000, hysteresis_ = 2;
  bool consecutive_ = false;
  double min_scale_ = 1.0;
  int64_t cur_iter_ = 0, last_overflow_iter_ = -1, cur_hysteresis_ = 2;
};

}  // namespace tessera::engine
