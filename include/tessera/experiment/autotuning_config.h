// DeepSpeed's "autotuning" section: what `tessera autotune CONFIG` searches (experiment/
// autotuner.h). `tessera train` does not act on it, as DeepSpeed's engine does not (the
// autotuner runs the training); in a trial's config `enabled` makes the built-in trial report
// the profiled steps' throughput and latency beside its validation loss.
#pragma once
#include <cstdint>
#include <string>

#include "tessera/io/config_section.h"

namespace tessera::io {
struct TrainConfig;
}

namespace tessera::experiment {

struct AutotuningConfig {
  bool enabled = false;
  std::string results_dir = "autotuning_results", exps_dir = "autotuning_exps";
  bool overwrite = true;
  std::string metric = "throughput";  // throughput (samples/s) or latency (s per step)
  int64_t start_profile_step = 3, end_profile_step = 5;  // the measured steps: [start, end)
  bool fast = true;  // false: also tune ZeRO's reduce_bucket_size and overlap_comm
  int64_t min_train_micro_batch_size_per_gpu = 1, max_train_micro_batch_size_per_gpu = 1024;
  int64_t num_tuning_micro_batch_sizes = 3;
  std::string tuner_type = "gridsearch";  // gridsearch, random or model_based
  int64_t tuner_early_stopping = 5;       // stop after this many trials without a better one
  int64_t tuner_num_trials = 50;
  int64_t mp_size = 1;
  int64_t min_train_batch_size = 1, max_train_batch_size = 0;  // 0: no bound

  static void parse(io::config::Section& s, AutotuningConfig& out);
};

const AutotuningConfig& autotuning_config(const io::TrainConfig& cfg);

}  // namespace tessera::experiment
