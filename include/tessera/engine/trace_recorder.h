// Per-rank timelines (the config's "trace" section, Tessera's own): a Chrome trace-event JSON
// file per rank, <output_path>/trace_rank<R>.json, with the engine's phases (fwd, bwd,
// bwd_inner, bwd_allreduce, step, and each step as a whole: train_batch), every collective (op,
// bytes, group; on the communication thread's track) and, with "kernels": true, every kernel, over
// global steps [from, to]. Timestamps are wall-clock microseconds, so the ranks' files line up
// when merged (pid = rank): open one in https://ui.perfetto.dev or chrome://tracing.
// On a GPU a kernel's event is its launch (the engine's phases wait for the device).
#pragma once
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/dispatch.h"
#include "tessera/io/train_config.h"

namespace tessera::engine {

class TraceRecorder : private KernelObserver {
 public:
  using Clock = std::chrono::steady_clock;
  // group: how collectives' group is named in their events ("mpi, 2 ranks").
  TraceRecorder(io::TrainConfig::Trace config, int rank, std::string group);
  ~TraceRecorder() override;  // writes the file if a window was recorded and not yet written
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  bool wants(int64_t step) const { return step >= config_.from && step <= config_.to; }
  bool recording() const { return recording_; }
  // The first forward of a step in the window; its end (after the optimizer step) writes the
  // file once the window is over.
  void begin_step(int64_t step);
  void end_step();
  // An engine phase, and a collective as the process group reports it (any thread).
  void phase(const char* name, Clock::time_point start, Clock::time_point end);
  void collective(const std::string& op, int64_t bytes, double bus_bytes, double seconds);
  void write();
  std::string path() const;

 private:
  void kernel_begin(Kernel k, Device device, const KernelCall& call) override;
  void kernel_end(Kernel k, Device device, const KernelCall& call) override;
  void add(std::string name, const char* category, int tid, Clock::time_point start,
           Clock::time_point end, nlohmann::json args);
  double micros(Clock::time_point t) const;

  io::TrainConfig::Trace config_;
  int rank_;
  std::string group_;
  std::chrono::microseconds epoch_offset_;  // wall clock minus steady clock
  std::mutex mutex_;
  std::vector<std::string> events_;  // serialised trace events
  bool recording_ = false, written_ = false;
  int64_t step_ = -1;
  Clock::time_point step_start_;
  std::vector<Clock::time_point> kernel_starts_;
};

}  // namespace tessera::engine
