#include "tessera/optim/lr_schedule_registry.h"

#include "tessera/named_registry.h"

namespace tessera::optim {

namespace {

using K = HyperParamKind;

// DeepSpeed's schedules (deepspeed/runtime/lr_schedules.py), with its defaults.
std::vector<LRScheduleEntry> builtin_schedules() {
  std::vector<LRScheduleEntry> out;
  out.push_back(
      {"WarmupLR",
       "warm up from warmup_min_lr to warmup_max_lr over warmup_num_steps, then hold",
       {{"warmup_min_lr", K::Lr, {0.0}, "the first step's lr"},
        {"warmup_max_lr", K::Lr, {}, "the lr after the warm-up (default: the optimizer's)"},
        {"warmup_num_steps", K::Steps, {1000.0}, "warm-up steps (at least 2 are taken)"}},
       true,
       [](const HyperParamValues& v, const ScheduleContext& c, WarmupType t) {
         return std::make_unique<WarmupLR>(v.number("warmup_min_lr"),
                                           v.number("warmup_max_lr", c.optimizer_lr),
                                           v.count("warmup_num_steps"), t);
       }});
  out.push_back({"WarmupDecayLR",
                 "WarmupLR, then a linear decay to 0 at total_num_steps",
                 {{"total_num_steps", K::Steps, {}, "where the decay reaches 0", true},
                  {"warmup_min_lr", K::Lr, {0.0}, "the first step's lr"},
                  {"warmup_max_lr", K::Lr, {0.001}, "the lr after the warm-up"},
                  {"warmup_num_steps", K::Steps, {1000.0}, "warm-up steps (at least 2 are taken)"}},
                 true,
                 [](const HyperParamValues& v, const ScheduleContext&, WarmupType t) {
                   return std::make_unique<WarmupDecayLR>(
                       v.count("total_num_steps"), v.number("warmup_min_lr"),
                       v.number("warmup_max_lr"), v.count("warmup_num_steps"), t);
                 }});
  out.push_back(
      {"WarmupCosineLR",
       "ratios of the optimizer's lr: warm up from warmup_min_ratio to 1, then a cosine to "
       "cos_min_ratio at total_num_steps",
       {{"total_num_steps", K::Steps, {}, "where the cosine ends", true},
        {"warmup_min_ratio", K::Ratio, {0.0}, "the first step's ratio"},
        {"warmup_num_steps", K::Steps, {1000.0}, "warm-up steps"},
        {"cos_min_ratio", K::Ratio, {0.0001}, "the ratio at total_num_steps"}},
       true,
       [](const HyperParamValues& v, const ScheduleContext& c, WarmupType t) {
         return std::make_unique<WarmupCosineLR>(
             c.optimizer_lr, v.count("total_num_steps"), v.number("warmup_min_ratio"),
             v.count("warmup_num_steps"), v.number("cos_min_ratio"), t);
       }});
  out.push_back(
      {"OneCycle",
       "a triangular lr cycle (optionally in stairs) then a decay; beta1 cycles inversely for "
       "optimizers with betas",
       {{"cycle_min_lr", K::Lr, {}, "the cycle's low lr", true},
        {"cycle_max_lr", K::Lr, {}, "the cycle's high lr", true},
        {"decay_lr_rate", K::Rate, {0.0}, "the decay after the cycle"},
        {"cycle_first_step_size", K::Steps, {2000.0}, "steps up"},
        {"cycle_second_step_size", K::Count, {}, "steps down (default: cycle_first_step_size)"},
        {"decay_step_size", K::Count, {0.0}, "steps per decay interval (0: no decay)"},
        {"cycle_first_stair_count", K::Count, {0.0}, "stairs up (0: smooth)"},
        {"cycle_second_stair_count",
         K::Count,
         {},
         "stairs down (default: cycle_first_stair_count)"},
        {"cycle_momentum", K::Bool, {1.0}, "cycle beta1 (not for SGD, as in DeepSpeed)"},
        {"cycle_min_mom", K::Momentum, {0.8}, "beta1 at the lr's peak"},
        {"cycle_max_mom", K::Momentum, {0.9}, "beta1 at the lr's low"},
        {"decay_mom_rate", K::Rate, {0.0}, "beta1's growth after the cycle"}},
       false,
       [](const HyperParamValues& v, const ScheduleContext& c, WarmupType) {
         OneCycleOptions o;
         o.cycle_min_lr = v.number("cycle_min_lr");
         o.cycle_max_lr = v.number("cycle_max_lr");
         o.decay_lr_rate = v.number("decay_lr_rate");
         o.cycle_first_step_size = v.count("cycle_first_step_size");
         o.cycle_second_step_size = static_cast<int64_t>(v.number("cycle_second_step_size", -1));
         o.cycle_first_stair_count = v.count("cycle_first_stair_count");
         o.cycle_second_stair_count =
             static_cast<int64_t>(v.number("cycle_second_stair_count", -1));
         o.decay_step_size = v.count("decay_step_size");
         o.cycle_momentum = v.flag("cycle_momentum") && c.optimizer_has_betas;
         o.cycle_min_mom = v.number("cycle_min_mom");
         o.cycle_max_mom = v.number("cycle_max_mom");
         o.decay_mom_rate = v.number("decay_mom_rate");
         return std::make_unique<OneCycle>(o);
       }});
  out.push_back(
      {"LRRangeTest",
       "an lr growing from lr_range_test_min_lr, linearly or in stairs (to find a good lr)",
       {{"lr_range_test_min_lr", K::Lr, {1e-3}, "the first step's lr"},
        {"lr_range_test_step_size", K::Steps, {2000.0}, "steps per growth interval"},
        {"lr_range_test_step_rate", K::Rate, {1.0}, "growth per interval"},
        {"lr_range_test_staircase", K::Bool, {0.0}, "grow in stairs"}},
       false,
       [](const HyperParamValues& v, const ScheduleContext&, WarmupType) {
         return std::make_unique<LRRangeTest>(
             v.number("lr_range_test_min_lr"), v.count("lr_range_test_step_size"),
             v.number("lr_range_test_step_rate"), v.flag("lr_range_test_staircase"));
       }});
  return out;
}

NamedRegistry<LRScheduleEntry>& schedule_registry() {
  static NamedRegistry<LRScheduleEntry> r("scheduler type", builtin_schedules());
  return r;
}

}  // namespace

const LRScheduleEntry& find_lr_schedule(const std::string& type) {
  return schedule_registry().find(type);
}
bool has_lr_schedule(const std::string& type) {
  return schedule_registry().has(type);
}
std::vector<std::string> registered_lr_schedules() {
  return schedule_registry().types();
}
std::string registered_lr_schedule_list() {
  return schedule_registry().list();
}
void register_lr_schedule(LRScheduleEntry entry) {
  schedule_registry().add(std::move(entry), "optim::register_lr_schedule");
}

}  // namespace tessera::optim
