// DeepSpeed's engine timers (wall_clock_breakdown): milliseconds in forward ("fwd"), backward
// ("bwd"), the autograd pass inside it ("bwd_inner"), the gradient reduction that ends it
// ("bwd_allreduce") and step ("step"), summed over an accumulation window; under ZeRO also
// the optimizer's parts of step. With a GPU model
// each interval is bracketed by device synchronisations, as DeepSpeed's timers do, so it
// measures the work and not its launch.
#pragma once
#include <array>
#include <chrono>
#include <functional>
#include <string>

namespace tessera::engine {

class EngineTimers {
 public:
  // The engine's five (DeepSpeed's engine timers, sent to the monitors), then the ZeRO
  // optimizer's three inside step (DeepSpeed's stage 1/2 optimizer timers): gradient
  // preparation (unscale, norm, clip), the update, and the all-gather of updated parameters.
  enum Kind {
    Forward,
    Backward,
    BackwardInner,
    BackwardAllreduce,
    Step,
    OptimizerAllgather,
    OptimizerGradients,
    OptimizerStep,
    kCount
  };
  static constexpr int kEngineKinds = OptimizerAllgather;
  using Clock = std::chrono::steady_clock;
  using Window = std::array<double, kCount>;  // milliseconds by Kind

  EngineTimers() = default;
  // sync: waits for the device (null on CPU).
  EngineTimers(bool enabled, std::function<void()> sync)
      : enabled_(enabled), sync_(std::move(sync)) {}
  bool enabled() const { return enabled_; }
  // Times even when not enabled (the flops profiler's step, a trace), until turned off again.
  void force(bool on) { forced_ = on; }
  // Told of every timed interval as it ends (a trace).
  using Listener = std::function<void(Kind kind, Clock::time_point start, Clock::time_point end)>;
  void set_listener(Listener listener) { listener_ = std::move(listener); }
  Clock::time_point start() const;
  void stop(Kind kind, Clock::time_point started);
  // The window's times, then a fresh window.
  Window take_window();
  const Window& window() const { return window_; }
  // DeepSpeed's names ("fwd", "bwd", ...) and monitor events (elapsed_time_ms_forward, ...).
  static const char* name(Kind kind);
  static const char* event(Kind kind);

 private:
  bool running() const { return enabled_ || forced_; }
  bool enabled_ = false, forced_ = false;
  std::function<void()> sync_;
  Listener listener_;
  Window window_{};
};

}  // namespace tessera::engine
