// Determined's DeepSpeedTrial helpers for hyperparameter-driven configs.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace tessera::trial {

// Determined's overwrite_deepspeed_config: `source`'s values copied into `base`, depth first:
// a nested object merges into the base's object of the same key, anything else replaces (or
// adds) the key. A non-object under a key the source nests into is an error naming the key.
nlohmann::json overwrite_deepspeed_config(nlohmann::json base, const nlohmann::json& source);
// The same with the base read from a JSON file; a key repeated in one object is an error, as
// DeepSpeed's config loader makes it.
nlohmann::json overwrite_deepspeed_config(const std::string& base_path,
                                          const nlohmann::json& source);

// Hyperparameters whose names are dotted config keys ("optimizer.params.lr": 0.01) as the
// nested object overwrite_deepspeed_config takes; names in `skip` (the config's own path, the
// batch size, ...) are left out.
nlohmann::json overrides_from_hparams(const std::map<std::string, nlohmann::json>& hparams,
                                      const std::set<std::string>& skip = {});

}  // namespace tessera::trial
