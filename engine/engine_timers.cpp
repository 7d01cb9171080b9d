#include "tessera/engine/engine_timers.h"

namespace tessera::engine {

EngineTimers::Clock::time_point EngineTimers::start() const {
  if (!running()) return {};
  if (sync_) sync_();
  return Clock::now();
}

void EngineTimers::stop(Kind kind, Clock::time_point started) {
  if (!running()) return;
  if (sync_) sync_();
  const Clock::time_point now = Clock::now();
  window_[kind] += std::chrono::duration<double, std::milli>(now - started).count();
  if (listener_) listener_(kind, started, now);
}

EngineTimers::Window EngineTimers::take_window() {
  const Window w = window_;
  window_ = {};
  return w;
}

const char* EngineTimers::name(Kind kind) {
  static const char* names[] = {"fwd",
                                "bwd",
                                "bwd_inner",
                                "bwd_allreduce",
                                "step",
                                "optimizer_allgather",
                                "optimizer_gradients",
                                "optimizer_step"};
  return names[kind];
}

const char* EngineTimers::event(Kind kind) {
  static const char* events[] = {"Train/Samples/elapsed_time_ms_forward",
                                 "Train/Samples/elapsed_time_ms_backward",
                                 "Train/Samples/elapsed_time_ms_backward_inner",
                                 "Train/Samples/elapsed_time_ms_backward_allreduce",
                                 "Train/Samples/elapsed_time_ms_step",
                                 "Train/Samples/elapsed_time_ms_optimizer_allgather",
                                 "Train/Samples/elapsed_time_ms_optimizer_gradients",
                                 "Train/Samples/elapsed_time_ms_optimizer_step"};
  return events[kind];
}

}  // namespace tessera::engine
