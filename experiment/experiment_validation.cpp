#include "tessera/experiment/experiment_validation.h"

#include <filesystem>
#include <set>

#include "tessera/error.h"
#include "tessera/experiment/hparam_sampling.h"
#include "tessera/experiment/search_method.h"
#include "tessera/io/files.h"
#include "tessera/io/train_config.h"
#include "tessera/launch/job.h"
#include "tessera/trial/deepspeed_config.h"

namespace tessera::experiment {

namespace fs = std::filesystem;

namespace {

// The hyperparameters the built-in trials read themselves; every other one is a config key.
const std::set<std::string> kTrialOwn = {"config", "global_batch_size"};

// The `tessera train` configs hyperparameters.config can name (one, or a categorical's values).
std::vector<fs::path> config_paths(const trial::ExperimentConfig& c) {
  const std::string where = c.path.empty() ? "experiment" : c.path;
  auto it = c.hyperparameters.find("config");
  TS_CHECK(it != c.hyperparameters.end(), where, ": the built-in trials need ",
           "'hyperparameters.config': the path of a `tessera train` config");
  std::vector<nlohmann::json> values;
  if (it->second.type == trial::Hyperparameter::Const)
    values = {it->second.val};
  else if (it->second.type == trial::Hyperparameter::Categorical)
    values = it->second.vals;
  else
    fail(where, ": 'hyperparameters.config' must be a path (or a categorical of paths)");
  std::vector<fs::path> out;
  for (const nlohmann::json& v : values) {
    TS_CHECK(v.is_string(), where, ": 'hyperparameters.config' must be a path, found ", v.dump());
    fs::path p = v.get<std::string>();
    if (p.is_relative() && !c.path.empty()) p = fs::path(c.path).parent_path() / p;
    TS_CHECK(fs::is_regular_file(p), where, ": 'hyperparameters.config': no file ",
             io::quoted(p.string()), " (a relative path is relative to the experiment file)");
    out.push_back(p);
  }
  return out;
}

void validate_builtin_trial(const trial::ExperimentConfig& c) {
  const std::string where = c.path.empty() ? "experiment" : c.path;
  SearchRandom random(c.experiment_seed);
  const nlohmann::json sample = sample_hparams(c.hyperparameters, random);
  std::map<std::string, nlohmann::json> hparams;
  for (const auto& [k, v] : sample.items()) hparams[k] = v;
  const nlohmann::json overrides = trial::overrides_from_hparams(hparams, kTrialOwn);
  const std::string kind = c.entrypoint.substr(8);  // builtin:<model.type>
  for (const fs::path& path : config_paths(c)) {
    const std::string file = path.string();
    const io::TrainConfig base =
        launch::parse_config(io::read_text_file(file), c.slots_per_trial, file);
    io::TrainConfig merged;
    try {
      merged = launch::parse_config(trial::overwrite_deepspeed_config(file, overrides).dump(),
                                    c.slots_per_trial, file);
    } catch (const Error& e) {
      fail(where, ": a trial's config (", file, " with the hyperparameters ", sample.dump(),
           ") is invalid: ", e.what());
    }
    const std::set<std::string> before(base.unknown_keys.begin(), base.unknown_keys.end());
    std::string unmatched;
    for (const std::string& k : merged.unknown_keys)
      if (!before.count(k)) unmatched += (unmatched.empty() ? "" : ", ") + k;
    TS_CHECK(unmatched.empty(), where, ": hyperparameters that match no key of ", file,
             " (every trial would train the config unchanged): ", unmatched);
    TS_CHECK(merged.model.type == kind, where, ": entrypoint ", c.entrypoint, " but ", file,
             " has model.type '", merged.model.type, "'");
  }
}

}  // namespace

void validate_experiment(const trial::ExperimentConfig& config) {
  make_search_method(config);  // the searcher's own checks (a grid's size among them)
  if (config.entrypoint.rfind("builtin:", 0) == 0) validate_builtin_trial(config);
}

}  // namespace tessera::experiment
