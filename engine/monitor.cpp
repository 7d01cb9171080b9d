#include "tessera/engine/monitor.h"

#include <charconv>
#include <string_view>

#include <fstream>

#include "tessera/engine/monitor_registry.h"
#include "tessera/error.h"

namespace tessera::engine {

namespace fs = std::filesystem;

CsvMonitor::CsvMonitor(const io::TrainConfig::Monitor& config)
    : dir_(fs::path(config.output_path) / config.job_name) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  TS_CHECK(!ec, "csv_monitor: cannot create '", dir_.string(), "': ", ec.message());
}

void CsvMonitor::write_events(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& e : events) {
    std::string file = e.name, header = e.name;
    for (char& ch : file)
      if (ch == '/' || ch == ' ') ch = '_';
    if (const size_t slash = header.rfind('/'); slash != std::string::npos)
      header = header.substr(slash + 1);
    std::ofstream& f = files_[file];
    const fs::path p = dir_ / (file + ".csv");
    if (!f.is_open()) {
      const bool fresh = !fs::exists(p);
      f.open(p, std::ios::app);
      TS_CHECK(f.good(), "csv_monitor: cannot write '", p.string(), "'");
      if (fresh) f << "step," << header << "\n";
    }
    // The shortest text that reads back as the same double (Python's repr, as DeepSpeed's
    // csv_monitor writes it).
    char value[32];
    const auto written = std::to_chars(value, value + sizeof value, e.value);
    f << e.step << "," << std::string_view(value, written.ptr) << "\n";
    f.flush();  // readable while the run goes on, as DeepSpeed's are
    TS_CHECK(f.good(), "csv_monitor: cannot write '", p.string(), "'");
  }
}

TensorBoardMonitor::TensorBoardMonitor(const io::TrainConfig::Monitor& config)
    : writer_((fs::path(config.output_path) / config.job_name).string()) {}

void TensorBoardMonitor::write_events(const std::vector<MonitorEvent>& events) {
  for (const MonitorEvent& e : events) writer_.add_scalar(e.name, e.value, e.step);
  writer_.flush();
}

MonitorMaster::MonitorMaster(const io::TrainConfig& config, int rank) {
  if (rank != 0) return;
  for (const std::string& type : registered_monitors()) {
    const auto it = config.monitors.find(type);
    if (it != config.monitors.end() && it->second.enabled)
      monitors_.push_back(find_monitor(type).build(it->second));
  }
}

void MonitorMaster::write_events(const std::vector<MonitorEvent>& events) {
  for (const auto& m : monitors_) m->write_events(events);
}

}  // namespace tessera::engine
