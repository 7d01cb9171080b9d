// DeepSpeed's CSV monitor (csv_monitor in the config): one file per event,
// "<output_path>/<job_name>/<event>.csv" ('/' in event names becomes '_'), rows "step,value".
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "tessera/io/train_config.h"

namespace tessera::engine {

class CsvMonitor {
 public:
  // Disabled (writes nothing) unless config.enabled.
  explicit CsvMonitor(const io::TrainConfig::CsvMonitor& config);
  void write(const std::string& event, int64_t step, double value);
  bool enabled() const { return enabled_; }

 private:
  bool enabled_;
  std::filesystem::path dir_;
};

}  // namespace tessera::engine
