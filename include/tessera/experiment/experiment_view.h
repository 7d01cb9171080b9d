// What `tessera experiment list/describe/best` and the live table while following show.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tessera/experiment/experiment_store.h"

namespace tessera::experiment {

// {"id", "name", "state", "searcher": {"name", "metric", "smaller_is_better"}, "trials": [{"id",
// "request_id", "state", "hparams", "batches", "best_validation": {metric: value} or {},
// "latest_validation": {...}, "restarts", "checkpoints"}]}
nlohmann::json describe_experiment(const ExperimentStore& store, int64_t id);

// The table of describe_experiment's trials, one line each, with a summary line first.
std::string trials_table(const nlohmann::json& described);

// {"experiments": [{"id", "name", "state", "trials"}]}
nlohmann::json experiments_summary(const ExperimentStore& store);

// describe_experiment's, plus "rungs" (ASHA's rung lengths in batches, [] for other searchers),
// "training_metric" and "curves": [{"trial", "training": [[batches, value]...], "validation":
// [...]}] (the training metric "loss", or the first one reported; the searcher's metric).
nlohmann::json experiment_detail(const ExperimentStore& store, int64_t id);

// The checkpoint with the best searcher metric among the experiment's trials (path, trial,
// batches, metric), or nullopt when no checkpoint has a validation.
std::optional<nlohmann::json> best_checkpoint(const ExperimentStore& store, int64_t id);

}  // namespace tessera::experiment
