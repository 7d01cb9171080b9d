// `tessera schedules [--json | --markdown]`: the LR schedule registry's entries (every
// scheduler.type a config can name) with each parameter's kind, default and doc, read from the
// entries; docs/training.md's table is --markdown's.
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "tessera/optim/lr_schedule_registry.h"

namespace tessera::cli {

namespace {

const char* kSchedulesHelp = R"(usage: tessera schedules [--json | --markdown]

The LR schedules a training config's "scheduler.type" can name (DeepSpeed's), each parameter
of "scheduler.params" with what it must be, its default and what it does: the entries the
config reader checks a scheduler section against and the engine builds the schedule from.
--json: {"schedules": [{"type", "doc", "warmup_type", "params": [{"name", "kind", "default",
"required", "doc"}]}]}
--markdown: the table docs/training.md holds.
)";

const char* kind_name(optim::ScheduleParamKind k) {
  using K = optim::ScheduleParamKind;
  switch (k) {
    case K::Lr:
      return "lr >= 0";
    case K::Ratio:
      return "ratio >= 0";
    case K::Rate:
      return "rate >= 0";
    case K::Steps:
      return "steps >= 1";
    case K::Count:
      return "integer >= 0";
    case K::Bool:
      return "true/false";
    case K::Momentum:
      return "in [0, 1)";
  }
  return "";
}

std::string default_text(const optim::ScheduleParam& p) {
  if (p.required) return "required";
  if (!p.default_value) return "see doc";
  if (p.kind == optim::ScheduleParamKind::Bool) return *p.default_value ? "true" : "false";
  std::ostringstream s;
  s << *p.default_value;
  return s.str();
}

}  // namespace

int schedules_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "markdown", "help"}, {});
  if (a.has("help")) {
    std::cout << kSchedulesHelp;
    return 0;
  }
  TS_CHECK(a.positional().empty(), "schedules: takes no arguments (see --help)");
  const bool md = a.has("markdown"), json = a.has("json");
  nlohmann::json all = nlohmann::json::array();
  if (md)
    std::cout << "| `scheduler.type` | parameter | value | default | what it does |\n"
              << "|---|---|---|---|---|\n";
  for (const std::string& type : optim::registered_lr_schedules()) {
    const optim::LRScheduleEntry& e = optim::find_lr_schedule(type);
    nlohmann::json params = nlohmann::json::array();
    if (!md && !json) std::cout << type << ": " << e.doc << "\n";
    for (const optim::ScheduleParam& p : e.params) {
      params.push_back({{"name", p.name},
                        {"kind", kind_name(p.kind)},
                        {"default", p.default_value ? nlohmann::json(*p.default_value) : nullptr},
                        {"required", p.required},
                        {"doc", p.doc}});
      if (md)
        std::cout << "| `" << type << "` | `" << p.name << "` | " << kind_name(p.kind) << " | "
                  << default_text(p) << " | " << p.doc << " |\n";
      else if (!json)
        std::cout << "  " << p.name << " (" << kind_name(p.kind) << ", " << default_text(p)
                  << "): " << p.doc << "\n";
    }
    if (md && e.takes_warmup_type)
      std::cout << "| `" << type
                << "` | `warmup_type` | log/linear | log | the warm-up's shape |\n";
    all.push_back(
        {{"type", type}, {"doc", e.doc}, {"warmup_type", e.takes_warmup_type}, {"params", params}});
  }
  if (json) std::cout << nlohmann::json{{"schedules", all}}.dump() << "\n";
  return 0;
}

}  // namespace tessera::cli
