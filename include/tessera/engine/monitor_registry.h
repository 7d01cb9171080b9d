// The monitor registry: each monitor section a training config can enable (DeepSpeed's
// csv_monitor and tensorboard, and a program's own) is one MonitorEntry: its section key, a
// doc line and its factory. The registry publishes each key to io's config reader, which parses
// the section (enabled, output_path, job_name: DeepSpeed's monitor keys) into
// config.monitors[key]; the engine's MonitorMaster builds every enabled one on rank 0, and
// `tessera monitors` (docs/training.md's table) lists them. A monitor of one's own is an
// engine::Monitor and one line:
//   const engine::RegisterMonitor kMine{{"my_monitor", "doc", [](const auto& section) {
//     return std::make_unique<MyMonitor>(section); }}};
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/engine/monitor.h"

namespace tessera::engine {

struct MonitorEntry {
  std::string type;  // the config's section key ("csv_monitor")
  std::string doc;
  // The monitor of an enabled section (rank 0 only).
  std::function<std::unique_ptr<Monitor>(const io::TrainConfig::Monitor&)> build;
};

// A key registered twice, or one that is another config section's, is an error.
void register_monitor(MonitorEntry entry);
// The entry of section `type`; an unknown one is an error listing the registered keys.
const MonitorEntry& find_monitor(const std::string& type);
std::vector<std::string> registered_monitors();

// The one registry line: `const engine::RegisterMonitor kMine{mine_entry()};`.
struct RegisterMonitor {
  explicit RegisterMonitor(MonitorEntry entry) { register_monitor(std::move(entry)); }
};

}  // namespace tessera::engine
