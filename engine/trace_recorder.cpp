// Chrome trace-event JSON (the "Trace Event Format": complete events "X" with microsecond
// timestamps, metadata events "M" naming each rank's process and tracks).
#include "tessera/engine/trace_recorder.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessera/io/files.h"

namespace tessera::engine {

namespace {
enum Track { kEngine = 0, kCollectives = 1, kKernels = 2 };
}  // namespace

TraceRecorder::TraceRecorder(io::TrainConfig::Trace config, int rank, std::string group)
    : config_(std::move(config)), rank_(rank), group_(std::move(group)) {
  using namespace std::chrono;
  epoch_offset_ = duration_cast<microseconds>(system_clock::now().time_since_epoch()) -
                  duration_cast<microseconds>(Clock::now().time_since_epoch());
}

TraceRecorder::~TraceRecorder() {
  try {
    if (step_ >= 0 && !written_) write();
  } catch (const std::exception& e) {
    std::cerr << "warning: trace: " << e.what() << "\n";
  }
  if (recording_ && config_.kernels) remove_kernel_observer(*this);
}

double TraceRecorder::micros(Clock::time_point t) const {
  return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count() +
         static_cast<double>(epoch_offset_.count());
}

void TraceRecorder::add(std::string name, const char* category, int tid, Clock::time_point start,
                        Clock::time_point end, nlohmann::json args) {
  nlohmann::json e{{"name", std::move(name)},
                   {"cat", category},
                   {"ph", "X"},
                   {"ts", micros(start)},
                   {"dur", std::chrono::duration<double, std::micro>(end - start).count()},
                   {"pid", rank_},
                   {"tid", tid},
                   {"args", std::move(args)}};
  std::lock_guard<std::mutex> lock(mutex_);
  if (recording_) events_.push_back(e.dump());
}

void TraceRecorder::begin_step(int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recording_ = true;
    step_ = step;
  }
  step_start_ = Clock::now();
  if (config_.kernels) add_kernel_observer(*this);
}

void TraceRecorder::end_step() {
  add("train_batch", "engine", kEngine, step_start_, Clock::now(),
      nlohmann::json{{"global_step", step_}});
  if (config_.kernels) remove_kernel_observer(*this);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recording_ = false;
  }
  if (step_ >= config_.to) write();
}

void TraceRecorder::phase(const char* name, Clock::time_point start, Clock::time_point end) {
  add(name, "engine", kEngine, start, end, nlohmann::json{{"global_step", step_}});
}

void TraceRecorder::collective(const std::string& op, int64_t bytes, double bus_bytes,
                               double seconds) {
  const Clock::time_point end = Clock::now();
  const auto start =
      end - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  add(op, "collective", kCollectives, start, end,
      nlohmann::json{{"bytes", bytes}, {"bus_bytes", bus_bytes}, {"group", group_}});
}

void TraceRecorder::kernel_begin(Kernel, Device, const KernelCall&) {
  kernel_starts_.push_back(Clock::now());
}

void TraceRecorder::kernel_end(Kernel k, Device device, const KernelCall& call) {
  if (kernel_starts_.empty()) return;
  const Clock::time_point start = kernel_starts_.back();
  kernel_starts_.pop_back();
  std::string inputs;
  for (const TensorBase& t : call.inputs)
    if (t.defined()) inputs += (inputs.empty() ? "" : ", ") + t.describe();
  add(kernel_name(k), "kernel", kKernels, start, Clock::now(),
      nlohmann::json{{"device", device.str()}, {"inputs", inputs}});
}

std::string TraceRecorder::path() const {
  return (std::filesystem::path(config_.output_path) /
          ("trace_rank" + std::to_string(rank_) + ".json"))
      .string();
}

void TraceRecorder::write() {
  std::vector<std::string> events;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events = events_;
    written_ = true;
  }
  auto meta = [&](const char* what, int tid, const nlohmann::json& args) {
    nlohmann::json m{{"name", what}, {"ph", "M"}, {"pid", rank_}, {"args", args}};
    if (tid >= 0) m["tid"] = tid;
    return m.dump();
  };
  std::vector<std::string> head{
      meta("process_name", -1, {{"name", "rank " + std::to_string(rank_)}}),
      meta("process_sort_index", -1, {{"sort_index", rank_}}),
      meta("thread_name", kEngine, {{"name", "engine"}}),
      meta("thread_name", kCollectives, {{"name", "collectives (" + group_ + ")"}}),
      meta("thread_name", kKernels, {{"name", "kernels"}})};
  std::filesystem::create_directories(config_.output_path);
  io::write_file_atomically(path(), [&](std::ostream& out) {
    out << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    bool first = true;
    for (const auto* list : {&head, &events})
      for (const std::string& e : *list) {
        out << (first ? "" : ",\n") << e;
        first = false;
      }
    out << "\n]}\n";
  });
  if (rank_ == 0)
    std::cerr << "trace of steps " << config_.from << "-" << std::min(step_, config_.to)
              << " written to " << path() << " (one file per rank)\n";
}

}  // namespace tessera::engine
