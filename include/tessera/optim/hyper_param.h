// One parameter of a registered extension point (an optimizer's `optimizer.params`, an LR
// schedule's `scheduler.params`): its config name, the kind of value the config reader
// checks, its default and a one-line doc. The registries hold lists of these; the config
// reader (io/), the factories, `tessera optimizers` / `tessera schedules` and the docs' tables
// all read the same list, so a default is written once.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::optim {

// What a value must be: an lr, rate or ratio >= 0, a step count >= 1, a count >= 0, a boolean,
// a momentum in [0, 1), a number > 0 (eps), a number >= 0 (weight decay, coefficients),
// betas (two numbers in [0, 1)), or one of a list of names.
enum class HyperParamKind {
  Lr,
  Ratio,
  Rate,
  Steps,
  Count,
  Bool,
  Momentum,
  Positive,
  NonNegative,
  Betas,
  Choice  // one of `choices` (a name); the value is its index
};

struct HyperParam {
  std::string name;
  HyperParamKind kind;
  // Empty: none (the parameter is required, or its default comes from the context: `doc`
  // says which); one number; two for Betas; booleans as 0 / 1.
  std::vector<double> default_value;
  std::string doc;
  bool required = false;
  // Non-empty: DeepSpeed's key, read and checked but without effect in Tessera, for this
  // reason (the reader warns).
  std::string no_effect;
  std::vector<std::string> choices;  // Choice: the names a config may give
};

// "lr >= 0", "steps >= 1", "true/false", "nccl or mpi", ...: what the reader checks, for
// tables and help.
std::string hyper_param_kind_text(const HyperParam& param);
// "0.001", "[0.9, 0.999]", "true", "required", "see doc".
std::string hyper_param_default_text(const HyperParam& param);
const HyperParam* find_hyper_param(const std::vector<HyperParam>& params, const std::string& name);

// The values a config states, by parameter name (each one number, two for Betas).
using HyperParamGiven = std::map<std::string, std::vector<double>>;

// A section's values over its parameters' defaults. `section` and `type` name them in
// messages ("'scheduler.params.total_num_steps' is required by WarmupDecayLR").
class HyperParamValues {
 public:
  HyperParamValues(std::string section, std::string type, const std::vector<HyperParam>& params,
                   HyperParamGiven given);
  // The given value, else the default, else `fallback` (a default from the context).
  double number(const std::string& name, std::optional<double> fallback = std::nullopt) const;
  int64_t count(const std::string& name) const { return static_cast<int64_t>(number(name)); }
  bool flag(const std::string& name) const { return number(name) != 0; }
  std::pair<double, double> pair(const std::string& name) const;  // Betas
  const std::string& choice(const std::string& name) const;       // Choice
  bool given(const std::string& name) const { return given_.count(name) > 0; }

 private:
  const std::vector<double>& values(const std::string& name) const;
  std::string section_, type_;
  const std::vector<HyperParam>& params_;
  HyperParamGiven given_;
};

}  // namespace tessera::optim
