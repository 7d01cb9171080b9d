// The sections whose types are registered (optimizer, scheduler): each parameter is read and
// checked as its registry entry says (kind, required, no effect), so a type of one's own is
// read like DeepSpeed's.
#include <algorithm>

#include "config_sections.h"
#include "tessera/optim/lr_schedule_registry.h"
#include "tessera/optim/optimizer_registry.h"

namespace tessera::io {

using config::Section;

namespace {

// One parameter's value(s), read and checked as its kind says.
std::vector<double> read_hyper_param(Section& p, const optim::HyperParam& param) {
  using K = optim::HyperParamKind;
  const std::string& k = param.name;
  const std::string& source = p.source();
  if (param.kind == K::Bool) {
    bool b = false;
    p.get(k, b);
    return {b ? 1.0 : 0.0};
  }
  if (param.kind == K::Steps || param.kind == K::Count) {
    int64_t n = 0;
    if (param.kind == K::Steps)
      p.get_min<int64_t>(k, n, 1, "a positive integer");
    else
      p.get_min<int64_t>(k, n, 0, "an integer >= 0");
    return {static_cast<double>(n)};
  }
  if (param.kind == K::Choice) {
    std::string name;
    p.get(k, name);
    const auto it = std::find(param.choices.begin(), param.choices.end(), name);
    p.expect(k, it != param.choices.end(), name, optim::hyper_param_kind_text(param));
    return {static_cast<double>(it - param.choices.begin())};
  }
  if (param.kind == K::Betas) {
    const config::json& b = p.raw(k);
    TS_CHECK(b.is_array() && b.size() == 2 && b[0].is_number() && b[1].is_number(), source, ": '",
             p.key(k), "' must be two numbers, found ", b.dump());
    const std::vector<double> v{b[0].get<double>(), b[1].get<double>()};
    for (double x : v) p.expect(k, x >= 0 && x < 1, x, "values in [0, 1)");
    return v;
  }
  double d = 0;
  p.get(k, d);
  if (param.kind == K::Momentum)
    p.expect(k, d >= 0 && d < 1, d, "in [0, 1)");
  else if (param.kind == K::Positive)
    p.expect(k, d > 0, d, "> 0");
  else
    p.expect(k, d >= 0, d, ">= 0");
  return {d};
}

// The stated parameters of `params` (required ones must be), then unknown keys warned about.
optim::HyperParamGiven read_hyper_params(Section& p, const std::string& section,
                                         const std::string& type,
                                         const std::vector<optim::HyperParam>& params) {
  optim::HyperParamGiven given;
  for (const optim::HyperParam& param : params) {
    if (p.has(param.name)) {
      given[param.name] = read_hyper_param(p, param);
      if (!param.no_effect.empty())
        p.warnings().push_back(p.source() + ": '" + p.key(param.name) +
                               "' has no effect in Tessera (ignored): " + param.no_effect);
    }
    TS_CHECK(!param.required || given.count(param.name), p.source(), ": '", section, ".params.",
             param.name, "' is required by ", type);
  }
  return given;
}

}  // namespace

optim::HyperParamValues TrainConfig::Optimizer::values() const {
  return optim::find_optimizer(type).values(params);
}

namespace config {

void parse_optimizer(Section o, TrainConfig& c) {
  const std::string& source = o.source();
  auto& opt = c.optimizer;
  opt.present = true;
  o.get("type", opt.type);
  o.expect("type", optim::has_optimizer(opt.type), opt.type,
           "one of " + optim::registered_optimizer_list());
  const optim::OptimizerEntry& entry = optim::find_optimizer(opt.type);
  Section p = o.sub("params");
  o.notes({{"type", "the optimizer's name"},
           {"params", "the type's parameters: `tessera optimizers`"}});
  TS_CHECK(!p.has("max_grad_norm"), source,
           ": 'optimizer.params.max_grad_norm' is not supported (as in DeepSpeed); use the "
           "top-level 'gradient_clipping'");
  opt.params = read_hyper_params(p, "optimizer", opt.type, entry.params);
  const optim::HyperParamValues values = entry.values(opt.params);
  // The entry's checks of the values together speak now, naming the file, rather than when
  // the engine builds the optimizer.
  std::vector<std::string> notes;
  try {
    if (entry.check) notes = entry.check(values);
  } catch (const Error& e) {
    fail(source, ": 'optimizer.params': ", e.what());
  }
  for (const std::string& note : notes) p.warnings().push_back(source + ": " + note);
  p.warn_unknown();
  o.warn_unknown();
}

void parse_scheduler(Section s, TrainConfig& c) {
  const std::string& source = s.source();
  auto& sc = c.scheduler;
  s.get("type", sc.type);
  s.expect("type", optim::has_lr_schedule(sc.type), sc.type,
           "one of " + optim::registered_lr_schedule_list());
  const optim::LRScheduleEntry& entry = optim::find_lr_schedule(sc.type);
  Section p = s.sub("params");
  s.note("type", "the schedule's name (no scheduler section: a constant lr)");
  s.note("params", "the type's parameters: `tessera schedules`");
  sc.params = read_hyper_params(p, "scheduler", sc.type, entry.params);
  if (entry.takes_warmup_type) {
    p.get("warmup_type", sc.warmup_type);
    TS_CHECK(sc.warmup_type == "log" || sc.warmup_type == "linear", source,
             ": 'scheduler.params.warmup_type' is \"", sc.warmup_type,
             "\", expected \"log\" or \"linear\"");
  }
  const optim::HyperParamValues values = entry.values(sc.params);
  if (entry.find("total_num_steps") && entry.find("warmup_num_steps")) {
    // DeepSpeed warns (and decays at once after the warm-up) rather than refusing.
    const double warmup = std::max(2.0, values.number("warmup_num_steps"));
    if (values.number("total_num_steps") < warmup)
      p.warnings().push_back(
          source + ": 'scheduler.params.total_num_steps' (" +
          std::to_string(values.count("total_num_steps")) + ") is less than warmup_num_steps (" +
          std::to_string(static_cast<int64_t>(warmup)) + "): the decay ends with the warm-up");
  }
  if (entry.find("cycle_momentum") && values.flag("cycle_momentum") &&
      !optim::find_optimizer(c.optimizer.type).has_betas)
    p.warnings().push_back(source + ": " + sc.type + "'s cycle_momentum is disabled because " +
                           "optimizer " + c.optimizer.type + " has no betas (as in DeepSpeed)");
  p.warn_unknown();
  s.warn_unknown();
}

}  // namespace config

}  // namespace tessera::io
