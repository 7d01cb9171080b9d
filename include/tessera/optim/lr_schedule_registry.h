// The LR schedule registry: every "scheduler.type" a config can name (DeepSpeed's schedules),
// each an entry holding its parameter schema (name, kind of value, default, one-line doc) and
// its factory. The config reader (io/) checks a scheduler section against the entry, the
// engine builds the schedule through it, and `tessera schedules` / docs/training.md's table
// print it: a default is written once, here.
//
//   const optim::LRScheduleEntry& e = optim::find_lr_schedule("WarmupLR");
//   auto schedule = e.build(optim::ScheduleValues(e, {{"warmup_num_steps", 100}}), {1e-3});
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/optim/lr_schedule.h"

namespace tessera::optim {

// What a parameter's value must be (the reader's check): an lr or rate >= 0, a ratio >= 0, a
// step count >= 1, a count >= 0, a boolean (0/1), a momentum in [0, 1).
enum class ScheduleParamKind { Lr, Ratio, Rate, Steps, Count, Bool, Momentum };

struct ScheduleParam {
  std::string name;
  ScheduleParamKind kind;
  std::optional<double> default_value;  // none: required, or given by the context (`doc` says)
  std::string doc;
  bool required = false;
};

// What a schedule takes from outside its section: the optimizer's lr (some schedules are
// ratios of it, or warm up to it) and whether the optimizer has betas to cycle.
struct ScheduleContext {
  double optimizer_lr = 1e-3;
  bool optimizer_has_betas = true;
};

struct LRScheduleEntry;

// A section's values over its entry's defaults (booleans as 0/1).
class ScheduleValues {
 public:
  ScheduleValues(const LRScheduleEntry& entry, std::map<std::string, double> given);
  // The given value, else the entry's default, else `fallback` (a default from the context).
  double number(const std::string& name, std::optional<double> fallback = std::nullopt) const;
  int64_t count(const std::string& name) const { return static_cast<int64_t>(number(name)); }
  bool flag(const std::string& name) const { return number(name) != 0; }
  bool given(const std::string& name) const { return given_.count(name) > 0; }

 private:
  const LRScheduleEntry& entry_;
  std::map<std::string, double> given_;
};

struct LRScheduleEntry {
  std::string type;  // scheduler.type, DeepSpeed's class name
  std::string doc;
  std::vector<ScheduleParam> params;
  bool takes_warmup_type = false;  // scheduler.params.warmup_type "log" | "linear"
  std::function<std::unique_ptr<LRSchedule>(const ScheduleValues&, const ScheduleContext&,
                                            WarmupType)>
      build;
  const ScheduleParam* find(const std::string& name) const;
};

// The entry of `type`; an unknown one is an error listing the registered types.
const LRScheduleEntry& find_lr_schedule(const std::string& type);
bool has_lr_schedule(const std::string& type);
std::vector<std::string> registered_lr_schedules();  // in registration order
// "WarmupLR, WarmupDecayLR, ...": the registered types for messages.
std::string registered_lr_schedule_list();
void register_lr_schedule(LRScheduleEntry entry);  // a type registered twice is an error

}  // namespace tessera::optim
