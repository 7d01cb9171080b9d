// Divergence checks of the engine's step: a skipped fp16 step must be the loss scaler's doing,
// and skipping must never hide broken weights.
#include <algorithm>
#include <cmath>

#include "tessera/engine/engine.h"
#include "tessera/ops.h"

namespace tessera::engine {

// A skipped step is the loss scaler's business while the scale can still shrink. At a scale
// that cannot (the minimum, or a static one), overflows past fp16.hysteresis in a row are not a
// too-large scale but a diverged run: weights past float16's range, or NaN from the data.
void Engine::check_overflow_explained() {
  const double scale = scaler_.scale();
  const bool at_floor = !scaler_.dynamic() || scale <= config_.fp16.min_loss_scale;
  overflows_at_min_scale_ = at_floor ? overflows_at_min_scale_ + 1 : 0;
  const int64_t allowed = std::max<int64_t>(1, config_.fp16.hysteresis);
  TS_CHECK(overflows_at_min_scale_ <= allowed, "engine.step: global step ", global_steps_,
           ": fp16 has skipped ", overflows_at_min_scale_, " steps in a row at the ",
           scaler_.dynamic() ? "minimum" : "static", " loss scale ", scale,
           ", which cannot shrink further (fp16.hysteresis = ", config_.fp16.hysteresis,
           " allowed), so the loss scale does not explain them: the run has diverged (weights "
           "past float16's range of 65504, or NaN from the data). Lower optimizer.params.lr, set "
           "gradient_clipping, or train in bf16 (\"bf16\": {\"enabled\": true})",
           scaler_.dynamic() ? "" : ", or use a dynamic scale (fp16.loss_scale 0)");
}

bool Engine::masters_finite() {
  double local = 0;
  for (const auto& g : optimizer().groups())
    if (!g.params.empty()) local += sum(sum_squares(g.params)).item();
  if (zero_) zero_->swap_out_state();  // (NVMe-swapped masters the check read go back out)
  const double flag = std::isfinite(local) ? 0.0 : 1.0;
  return group_->all_reduce_scalar(flag) == 0.0;  // every rank decides alike
}

}  // namespace tessera::engine
