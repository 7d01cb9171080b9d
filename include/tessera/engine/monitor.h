// DeepSpeed's monitors: each monitor section of the config (csv_monitor, tensorboard, and any
// registered with the monitor registry, monitor_registry.h), written by rank 0. Events are
// DeepSpeed's (name, value, step) tuples; the engine writes Train/Samples/lr and
// Train/Samples/loss_scale (fp16) at every optimizer step with the number of samples trained as
// the step, the Trainer the losses and timings, and users their own through
// Engine::write_events.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/io/event_file_writer.h"
#include "tessera/io/train_config.h"

namespace tessera::engine {

struct MonitorEvent {
  std::string name;  // e.g. "Train/Samples/train_loss"
  double value = 0;
  int64_t step = 0;  // DeepSpeed's x axis: samples for Train/Samples/*
};

// DeepSpeed's Monitor: one destination of the events.
class Monitor {
 public:
  virtual ~Monitor() = default;
  virtual void write_events(const std::vector<MonitorEvent>& events) = 0;
};

// csv_monitor: one file per event, <output_path>/<job_name>/<name with '/' and ' ' as '_'>.csv,
// rows "step,value" under the header "step,<the name's last component>" (DeepSpeed's layout;
// the header is written when the file is new, so a resumed run appends rows only).
class CsvMonitor : public Monitor {
 public:
  explicit CsvMonitor(const io::TrainConfig::Monitor& config);
  void write_events(const std::vector<MonitorEvent>& events) override;

 private:
  std::filesystem::path dir_;
  // One appending stream per event, kept open: a step writes several events, and opening
  // each file per event cost more than a small model's step.
  std::map<std::string, std::ofstream> files_;
};

// tensorboard: an event file in <output_path>/<job_name>/, flushed after every call.
class TensorBoardMonitor : public Monitor {
 public:
  explicit TensorBoardMonitor(const io::TrainConfig::Monitor& config);
  void write_events(const std::vector<MonitorEvent>& events) override;
  const std::string& path() const { return writer_.path(); }

 private:
  io::EventFileWriter writer_;
};

// DeepSpeed's MonitorMaster: every enabled monitor of the config, in registration order, on
// rank 0 (nothing elsewhere).
class MonitorMaster {
 public:
  MonitorMaster(const io::TrainConfig& config, int rank);
  bool enabled() const { return !monitors_.empty(); }
  void write_events(const std::vector<MonitorEvent>& events);

 private:
  std::vector<std::unique_ptr<Monitor>> monitors_;
};

}  // namespace tessera::engine
