// The engine's observability hooks: the flops profiler step (DeepSpeed's flops_profiler
// section: the profile step's forwards counted and timed, and after its optimizer step
// DeepSpeed's report) and the per-rank trace (Tessera's trace section).
#include <filesystem>
#include <iostream>

#include "tessera/engine/engine.h"
#include "tessera/io/files.h"

namespace tessera::engine {

void Engine::begin_profiled_forward() {
  // Each phase of the step is timed (device-synchronised) even without wall_clock_breakdown.
  timers_.force(true);
  if (profiled_forwards_++ == 0) {
    flops_profiler_->start_profile();
  } else {
    flops_profiler_->resume_profile();
  }
}

void Engine::report_flops_profile() {
  const auto& cfg = config_.flops_profiler;
  const EngineTimers::Window& w = timers_.window();
  nn::FlopsProfileSummary s;
  s.profile_step = cfg.profile_step;
  s.world_size = s.data_parallel_size = world_size();
  s.micro_batch_size = config_.micro_batch_size;
  s.forwards = profiled_forwards_;
  s.forward_latency = w[EngineTimers::Forward] / 1e3;
  s.backward_latency = w[EngineTimers::Backward] / 1e3;
  s.step_latency = w[EngineTimers::Step] / 1e3;
  s.recompute_fwd_factor = cfg.recompute_fwd_factor;
  s.peak_flops = nn::peak_flops(device(), compute_dtype_, &s.peak_source);
  nn::FlopsProfileOptions o;
  o.module_depth = cfg.module_depth;
  o.top_modules = cfg.top_modules;
  o.detailed = cfg.detailed;
  const std::string text = flops_profiler_->model_profile(s, o);
  flops_profile_ =
      nn::ModelProfile{flops_profiler_->total_flops(), flops_profiler_->total_macs(),
                       flops_profiler_->total_params(), flops_profiler_->total_duration(), text};
  flops_profiler_->end_profile();
  profiled_forwards_ = 0;
  if (cfg.output_file.empty()) {
    std::cout << text << std::flush;
    return;
  }
  const std::filesystem::path parent = std::filesystem::path(cfg.output_file).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  io::write_file_atomically(cfg.output_file, [&](std::ostream& out) { out << text; });
  std::cerr << "flops profile of step " << cfg.profile_step << " written to " << cfg.output_file
            << "\n";
}

void Engine::update_forced_timers() {
  const bool forced = profiled_forwards_ > 0 || (trace_ && trace_->recording());
  timers_.force(forced);
  // Without wall_clock_breakdown nobody takes the window: each step starts a fresh one.
  if (!timers_.enabled() && !forced) timers_.take_window();
}

void Engine::start_trace() {
  const std::string group = group_->backend() + ", " + std::to_string(group_->size()) +
                            (group_->size() == 1 ? " rank" : " ranks");
  trace_ = std::make_unique<TraceRecorder>(config_.trace, group_->rank(), group);
  TraceRecorder* trace = trace_.get();
  timers_.set_listener([trace](EngineTimers::Kind kind, EngineTimers::Clock::time_point start,
                               EngineTimers::Clock::time_point end) {
    if (trace->recording()) trace->phase(EngineTimers::name(kind), start, end);
  });
  group_->logger().set_listener(
      [trace](const std::string& op, int64_t bytes, double bus_bytes, double seconds) {
        trace->collective(op, bytes, bus_bytes, seconds);
      });
}

}  // namespace tessera::engine
