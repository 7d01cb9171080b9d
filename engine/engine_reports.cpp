// The engine's reports: wall_clock_breakdown's and memory_breakdown's lines and events, the
// flops profiler step (DeepSpeed's flops_profiler section: the profile step's forwards
// counted and timed, and after its optimizer step DeepSpeed's report) and the per-rank trace
// (Tessera's trace section).
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "tessera/cuda.h"
#include "tessera/engine/engine.h"
#include "tessera/io/files.h"

namespace tessera::engine {

void Engine::report_breakdowns() {
  const bool print_now = global_steps_ % config_.steps_per_print == 0;
  if (timers_.enabled()) {
    // As DeepSpeed: every step's window to the monitors; the line (DeepSpeed prints one
    // every step) as the mean over the steps since the last one.
    const EngineTimers::Window w = timers_.take_window();
    std::vector<MonitorEvent> events;
    for (int k = 0; k < EngineTimers::kCount; ++k) {
      timer_sums_[k] += w[k];
      // The monitors get DeepSpeed's engine events (the optimizer's parts are printed only).
      if (k < EngineTimers::kEngineKinds)
        events.push_back({EngineTimers::event(EngineTimers::Kind(k)), w[k], global_samples()});
    }
    monitor_->write_events(events);
    if (print_now && is_lead()) {
      // DeepSpeed's two lines: the ZeRO optimizer's (allgather, gradients, step), the engine's.
      auto line = [&](int from, int to) {
        std::string text = "time (ms)";
        char part[64];
        for (int k = from; k < to; ++k) {
          std::snprintf(part, sizeof part, " | %s: %.2f", EngineTimers::name(EngineTimers::Kind(k)),
                        timer_sums_[k] / static_cast<double>(config_.steps_per_print));
          text += part;
        }
        return text + "\n";
      };
      if (zero_) std::cerr << line(EngineTimers::kEngineKinds, EngineTimers::kCount);
      std::cerr << line(0, EngineTimers::kEngineKinds);
    }
    if (print_now) timer_sums_ = {};
  }
  if (config_.memory_breakdown && print_now) {
    const parallel::MemoryStats m = memory();
    const AllocatorStats host = allocator_for(DeviceType::CPU).stats();
    char line[320];
    int n = std::snprintf(line, sizeof line,
                          "memory (MB) [rank %d, step %ld] | params: %.2f | grads: %.2f | "
                          "optimizer: %.2f | buffers: %.2f | swap: %.2f | disk: %.2f | host "
                          "allocated: %.2f | host peak: %.2f",
                          rank(), static_cast<long>(global_steps_), m.params / 1e6, m.grads / 1e6,
                          m.optimizer / 1e6, m.buffers / 1e6, m.swap / 1e6, m.disk / 1e6,
                          host.allocated / 1e6, host.peak_allocated / 1e6);
    if (device().is_cuda()) {
      const CudaMemoryStats c = cuda_memory_stats(device().index);
      std::snprintf(line + n, sizeof line - static_cast<size_t>(n),
                    " | gpu allocated: %.2f | gpu peak: %.2f", c.allocated / 1e6,
                    c.peak_allocated / 1e6);
    }
    std::cerr << line << "\n";
  }
}

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
  // One file per process of the job (trace_rank<world rank>): with tensor or pipeline
  // parallelism several processes share a data-parallel rank.
  trace_ = std::make_unique<TraceRecorder>(config_.trace, parallel::world()->rank(), group);
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
