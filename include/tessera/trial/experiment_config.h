// An experiment's configuration in Determined's YAML schema. Unknown keys warn; a wrong
// value is an error naming the file, line and key:
//   exp.yaml:7: 'searcher.max_length' must be a map with one of batches, records, epochs
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tessera::trial {

// Determined's lengths: {batches: N}, {records: N} or {epochs: N}.
struct Length {
  enum Unit { Batches, Records, Epochs } unit = Batches;
  int64_t value = 0;
  std::string str() const;  // "100 batches"
};

struct Hyperparameter {
  enum Type { Const, Int, Double, Log, Categorical } type = Const;
  nlohmann::json val;                // const
  double minval = 0, maxval = 0;     // int, double; log: exponents of base
  double base = 10;                  // log
  std::vector<nlohmann::json> vals;  // categorical
  std::optional<int64_t> count;      // grid points (the grid searcher)
};

struct ExperimentConfig {
  std::string name, description, entrypoint;
  std::string sha256;  // of the YAML text: recorded in each checkpoint
  // Nested groups are flattened with dots: {optimizer: {lr: 0.1}} is "optimizer.lr".
  std::map<std::string, Hyperparameter> hyperparameters;
  // Determined's searcher section: the keys every searcher reads, and the keys of its own
  // (tessera/trial/searcher_schema.h; the built-in searchers: Determined's single, random, grid,
  // adaptive_asha and async_halving with Determined's defaults, and tpe).
  struct Searcher {
    std::string name = "single";
    std::string metric;
    bool smaller_is_better = true;
    Length max_length;
    // Every key of the searcher's schema, its default where the file has none:
    // {"max_trials": 20, "divisor": 4.0, "mode": "standard", ...}.
    nlohmann::json params = nlohmann::json::object();
    // A key of params as its kind; an absent key (or one of another kind) is an error naming it.
    int64_t count(const std::string& key) const;
    double number(const std::string& key) const;
    std::string choice(const std::string& key) const;
    std::vector<int64_t> counts(const std::string& key) const;
  } searcher;
  std::optional<int64_t> records_per_epoch;
  std::optional<Length> min_validation_period, min_checkpoint_period;
  int64_t scheduling_unit = 100;
  bool perform_initial_validation = false;
  std::string checkpoint_policy = "best";  // best, all, none
  struct CheckpointStorage {
    std::string type = "shared_fs";
    std::string host_path, storage_path;
    int64_t save_experiment_best = 0, save_trial_best = 1, save_trial_latest = 1;
  } checkpoint_storage;
  int64_t slots_per_trial = 1;
  int64_t max_slots = 0;  // resources.max_slots: slots all trials may use at once (0: the cores)
  // resources.scheduler: "local" (trials as processes here) or "slurm" (each trial a Slurm job
  // started with srun), with resources.slurm's options.
  std::string scheduler = "local";
  struct Slurm {
    std::string partition, time_limit;   // srun --partition, --time ("" = the cluster's)
    int64_t gpus_per_slot = 0;           // srun --gpus-per-task
    std::vector<std::string> srun_args;  // anything else, passed as is
  } slurm;
  int64_t max_restarts = 5;
  int64_t aggregation_frequency = 1;
  // reproducibility.experiment_seed: trial t's seed is experiment_seed + t (default 0).
  uint64_t experiment_seed = 0;
  nlohmann::json data = nlohmann::json::object();  // the `data` section, as the trial reads it
  std::vector<std::string> warnings;               // unknown keys, with where they are
  std::string path;  // the file it was read from (from_file), else empty

  static ExperimentConfig parse(const std::string& yaml_text, const std::string& source);
  static ExperimentConfig from_file(const std::string& path);
  // A length in batches of `global_batch_size` records (epochs need records_per_epoch);
  // partial batches round up, as a trial trains whole batches.
  int64_t batches(const Length& length, int64_t global_batch_size) const;
  // The constant value of a hyperparameter, or an error naming it.
  const nlohmann::json& constant(const std::string& name) const;
};

}  // namespace tessera::trial
