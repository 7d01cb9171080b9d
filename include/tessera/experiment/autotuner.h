// DeepSpeed's autotuner (`deepspeed --autotuning tune`) as `tessera autotune CONFIG`: the
// config's model is sized once by estimate-memory (launch/memory_estimate.h), every (ZeRO
// stage, micro-batch size[, reduce_bucket_size, overlap_comm]) point whose predicted bytes per
// rank exceed the memory limit is pruned without running, and the rest run as short trials of
// an experiment in the store (one at a time, so each is timed alone; the web view shows the
// search): each trains end_profile_step steps and reports the throughput (samples/s) or
// latency (s per step) of steps [start_profile_step, end_profile_step). The best point's
// config, the original with only the tuned keys changed, goes to
// results_dir/ds_config_optimal.json, and the ranked table to results_dir/summary.txt.
//
// The train batch stays the config's: the micro-batch m must divide it over the data-parallel
// ranks, gradient accumulation making up the rest. The experiment's searcher, "autotune"
// (autotune_search.cpp), runs gridsearch (the points in order), random (a seeded shuffle) or
// model_based (ridge regression of the metric on stage and micro-batch, fitted to the finished
// trials, picks each next point), up to tuner_num_trials, stopping after tuner_early_stopping
// finished trials without a better metric.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/io/train_config.h"

namespace tessera::experiment {

struct AutotunePoint {
  int stage = 0;
  int64_t micro_batch = 1, accumulation = 1;
  int64_t reduce_bucket_size = 0;  // 0: the config's (fast mode)
  std::optional<bool> overlap_comm;
  int64_t predicted_bytes = 0;  // per rank: model state and one micro-batch's activations
  bool fits = true;
  std::string name;           // "z2_mbs4_gas2"
  nlohmann::json tuned_keys;  // the keys this point sets, as config JSON
  // After the search: the trial's state and metric (none when it did not run or report).
  std::string state;
  std::optional<double> metric;
};

// The search space of the config (its JSON text, read from `source`) over `ranks` processes,
// each point's predicted memory against `memory_limit` bytes per rank (fits), in the order
// gridsearch runs them. Errors name what cannot be tuned (a pipeline; a train batch no
// micro-batch in range divides).
std::vector<AutotunePoint> autotune_points(const std::string& config_text,
                                           const std::string& source, int ranks,
                                           int64_t memory_limit);

struct AutotuneOptions {
  std::string config_path;
  int ranks = 1;
  int64_t memory_limit = 0;  // bytes per rank; 0: this machine's memory over the ranks
  std::string store_dir;
  std::string tessera;  // the program that runs the trials (`tessera trial`)
  std::string device;   // --device for every trial ("": the config's)
  std::function<void(const std::string&)> log;  // progress lines
};

struct AutotuneResult {
  std::vector<AutotunePoint> points;
  std::optional<size_t> best;  // index into points
  int64_t experiment = 0;
  std::string metric;
  bool stopped_early = false;
  std::string optimal_config;  // results_dir/ds_config_optimal.json ("" without a best)
};

// tuner_early_stopping: whether the last `patience` of the metrics (in the order their trials
// finished) brought nothing better than the best before them (latency: smaller is better).
bool autotune_stale(const std::vector<double>& metrics, int64_t patience,
                    const std::string& metric);

// This machine's memory over `ranks` processes: the default memory limit.
int64_t default_memory_limit(int ranks);

AutotuneResult autotune(const AutotuneOptions& options);

// The ranked table: measured points best first, then the pruned ones with their predictions.
std::string autotune_table(const AutotuneResult& result, int64_t memory_limit);

}  // namespace tessera::experiment
