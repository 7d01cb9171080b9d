// The built-in monitors (DeepSpeed's csv_monitor and tensorboard) as registry entries, and the
// registry that publishes every monitor's section key to io's config reader.
#include "tessera/engine/monitor_registry.h"

#include "tessera/io/config_section_registry.h"
#include "tessera/named_registry.h"

namespace tessera::engine {

namespace {

NamedRegistry<MonitorEntry>& monitor_registry() {
  static NamedRegistry<MonitorEntry> registry = [] {
    std::vector<MonitorEntry> builtin{
        {"csv_monitor", "one CSV file per event (step,value rows) in output_path/job_name/",
         [](const io::TrainConfig::Monitor& s) { return std::make_unique<CsvMonitor>(s); }},
        {"tensorboard", "a TensorBoard event file in output_path/job_name/",
         [](const io::TrainConfig::Monitor& s) {
           return std::make_unique<TensorBoardMonitor>(s);
         }}};
    for (const MonitorEntry& e : builtin) io::register_monitor_section(e.type, e.doc);
    return NamedRegistry<MonitorEntry>("monitor", std::move(builtin));
  }();
  return registry;
}

// Publishes the built-in keys when the library loads: every config read parses their sections.
[[maybe_unused]] const bool kBuiltinMonitorsPublished = (monitor_registry(), true);

}  // namespace

void register_monitor(MonitorEntry entry) {
  NamedRegistry<MonitorEntry>& registry = monitor_registry();
  registry.check_new(entry, "register_monitor");
  io::register_monitor_section(entry.type, entry.doc);
  registry.add(std::move(entry), "register_monitor");
}

const MonitorEntry& find_monitor(const std::string& type) {
  return monitor_registry().find(type);
}

std::vector<std::string> registered_monitors() {
  return monitor_registry().types();
}

}  // namespace tessera::engine
