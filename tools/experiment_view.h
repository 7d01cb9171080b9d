// What `tessera experiment list/describe/best` and the live table while following show.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tessera/experiment/experiment_store.h"

namespace tessera::cli {

// {"id", "name", "state", "searcher": {"name", "metric", "smaller_is_better"}, "trials": [{"id",
// "request_id", "state", "hparams", "batches", "best_validation": {metric: value} or {},
// "latest_validation": {...}, "restarts", "checkpoints"}]}
nlohmann::json describe_experiment(const experiment::ExperimentStore& store, int64_t id);

// The table of describe_experiment's trials, one line each, with a summary line first.
std::string trials_table(const nlohmann::json& described);

// The checkpoint with the best searcher metric among the experiment's trials (path, trial,
// batches, metric), or nullopt when no checkpoint has a validation.
std::optional<nlohmann::json> best_checkpoint(const experiment::ExperimentStore& store, int64_t id);

}  // namespace tessera::cli
