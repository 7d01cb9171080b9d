// The LR schedule registry: every "scheduler.type" a config can name (DeepSpeed's schedules),
// each an entry holding its parameter schema (name, kind of value, default, one-line doc) and
// its factory. The config reader (io/) checks a scheduler section against the entry, the
// engine builds the schedule through it, and `tessera schedules` / docs/training.md's table
// print it: a default is written once, here.
//
//   const optim::LRScheduleEntry& e = optim::find_lr_schedule("WarmupLR");
//   auto schedule = e.build(e.values({{"warmup_num_steps", {100}}}), {1e-3});
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/optim/hyper_param.h"
#include "tessera/optim/lr_schedule.h"

namespace tessera::optim {

// What a schedule takes from outside its section: the optimizer's lr (some schedules are
// ratios of it, or warm up to it) and whether the optimizer has betas to cycle.
struct ScheduleContext {
  double optimizer_lr = 1e-3;
  bool optimizer_has_betas = true;
};

struct LRScheduleEntry {
  std::string type;  // scheduler.type, DeepSpeed's class name
  std::string doc;
  std::vector<HyperParam> params;
  bool takes_warmup_type = false;  // scheduler.params.warmup_type "log" | "linear"
  std::function<std::unique_ptr<LRSchedule>(const HyperParamValues&, const ScheduleContext&,
                                            WarmupType)>
      build;
  const HyperParam* find(const std::string& name) const { return find_hyper_param(params, name); }
  // The section's values over this entry's defaults.
  HyperParamValues values(HyperParamGiven given) const {
    return HyperParamValues("scheduler", type, params, std::move(given));
  }
};

// The entry of `type`; an unknown one is an error listing the registered types.
const LRScheduleEntry& find_lr_schedule(const std::string& type);
bool has_lr_schedule(const std::string& type);
std::vector<std::string> registered_lr_schedules();  // in registration order
// "WarmupLR, WarmupDecayLR, ...": the registered types for messages.
std::string registered_lr_schedule_list();
void register_lr_schedule(LRScheduleEntry entry);  // a type registered twice is an error

}  // namespace tessera::optim
