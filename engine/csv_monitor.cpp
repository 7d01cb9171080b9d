#include "tessera/engine/csv_monitor.h"

#include <fstream>

#include "tessera/error.h"

namespace tessera::engine {

namespace fs = std::filesystem;

CsvMonitor::CsvMonitor(const io::TrainConfig::CsvMonitor& config) : enabled_(config.enabled) {
  if (!enabled_) return;
  dir_ = fs::path(config.output_path) / config.job_name;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  TS_CHECK(!ec, "csv_monitor: cannot create '", dir_.string(), "': ", ec.message());
}

void CsvMonitor::write(const std::string& event, int64_t step, double value) {
  if (!enabled_) return;
  std::string name = event;
  for (char& ch : name)
    if (ch == '/') ch = '_';
  const fs::path p = dir_ / (name + ".csv");
  const bool fresh = !fs::exists(p);
  std::ofstream f(p, std::ios::app);
  TS_CHECK(f.good(), "csv_monitor: cannot write '", p.string(), "'");
  f.precision(9);
  if (fresh) f << "step," << event << "\n";
  f << step << "," << value << "\n";
}

}  // namespace tessera::engine
