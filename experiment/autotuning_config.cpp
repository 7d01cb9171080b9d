#include "tessera/experiment/autotuning_config.h"

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/tensor_parallel_config.h"

namespace tessera::experiment {

namespace {

void describe(io::config::Section& s) {
  s.notes(
      {{"", "DeepSpeed's autotuning: what `tessera autotune` searches (docs/experiments.md)"},
       {"enabled", "in a trial's config: report the profiled steps' throughput and latency"},
       {"results_dir", "where ds_config_optimal.json and the ranked table go"},
       {"exps_dir", "where each candidate's config and the search's experiment file go"},
       {"overwrite", "false: an existing results_dir or exps_dir is an error"},
       {"metric", "throughput (samples/s, larger is better) or latency (s per step)"},
       {"start_profile_step", "the first measured step (0-based) of each trial"},
       {"end_profile_step", "the step after the last measured one; the trial's length"},
       {"fast", "false: also tune ZeRO's reduce_bucket_size and overlap_comm"},
       {"min_train_micro_batch_size_per_gpu", "the smallest micro-batch tried"},
       {"max_train_micro_batch_size_per_gpu", "the largest micro-batch tried"},
       {"num_tuning_micro_batch_sizes", "micro-batch sizes per ZeRO stage (the largest fitting)"},
       {"tuner_type",
        "gridsearch (in order), random (shuffled) or model_based (a cost model picks)"},
       {"tuner_early_stopping", "stop after this many trials without a better metric"},
       {"tuner_num_trials", "the most trials the search runs"},
       {"mp_size", "model-parallel ranks: must be tensor_parallel.autotp_size"},
       {"max_train_batch_size", "checked against the config's train_batch_size (kept)"},
       {"min_train_batch_size", "checked against the config's train_batch_size (kept)"}});
}

// DeepSpeed keys for a Python launcher and its profiling run, which Tessera's search does not
// need: stating them is an error with the reason, not a silent no-op.
void refuse_launcher_keys(io::config::Section& s) {
  s.refused("arg_mappings",
            "it maps config keys to a training script's arguments; Tessera's trials read the "
            "candidate configs themselves");
  s.refused("metric_path", "the experiment store keeps every trial's metrics");
  s.refused("model_info_path",
            "Tessera sizes the model from its config (estimate-memory) without a profiling run");
  s.refused("model_info",
            "Tessera sizes the model from its config (estimate-memory) without a profiling run");
}

}  // namespace

void AutotuningConfig::parse(io::config::Section& s, AutotuningConfig& out) {
  describe(s);
  s.get("enabled", out.enabled);
  s.get("results_dir", out.results_dir);
  s.get("exps_dir", out.exps_dir);
  s.get("overwrite", out.overwrite);
  s.get("metric", out.metric);
  s.expect("metric", out.metric == "throughput" || out.metric == "latency", out.metric,
           "\"throughput\" or \"latency\" (\"flops\" is not built)");
  s.get_min<int64_t>("start_profile_step", out.start_profile_step, 0, "an integer >= 0");
  s.get_min<int64_t>("end_profile_step", out.end_profile_step, 1, "a positive integer");
  s.expect("end_profile_step", out.end_profile_step > out.start_profile_step, out.end_profile_step,
           "more than start_profile_step (" + std::to_string(out.start_profile_step) + ")");
  s.get("fast", out.fast);
  s.get_min<int64_t>("min_train_micro_batch_size_per_gpu", out.min_train_micro_batch_size_per_gpu,
                     1, "a positive integer");
  s.get_min<int64_t>("max_train_micro_batch_size_per_gpu", out.max_train_micro_batch_size_per_gpu,
                     1, "a positive integer");
  s.expect("max_train_micro_batch_size_per_gpu",
           out.max_train_micro_batch_size_per_gpu >= out.min_train_micro_batch_size_per_gpu,
           out.max_train_micro_batch_size_per_gpu, "at least min_train_micro_batch_size_per_gpu");
  s.get_min<int64_t>("num_tuning_micro_batch_sizes", out.num_tuning_micro_batch_sizes, 1,
                     "a positive integer");
  s.get("tuner_type", out.tuner_type);
  s.expect("tuner_type",
           out.tuner_type == "gridsearch" || out.tuner_type == "random" ||
               out.tuner_type == "model_based",
           out.tuner_type, "\"gridsearch\", \"random\" or \"model_based\"");
  s.get_min<int64_t>("tuner_early_stopping", out.tuner_early_stopping, 1, "a positive integer");
  s.get_min<int64_t>("tuner_num_trials", out.tuner_num_trials, 1, "a positive integer");
  s.get_min<int64_t>("mp_size", out.mp_size, 1, "a positive integer");
  s.get_min<int64_t>("min_train_batch_size", out.min_train_batch_size, 1, "a positive integer");
  s.get_min<int64_t>("max_train_batch_size", out.max_train_batch_size, 1, "a positive integer");
  refuse_launcher_keys(s);
}

const AutotuningConfig& autotuning_config(const io::TrainConfig& cfg) {
  return cfg.section<AutotuningConfig>();
}

namespace {

// The train batch stays the config's; DeepSpeed's bounds on it must hold it, and mp_size is the
// config's own tensor parallelism.
void check_autotuning(io::TrainConfig& cfg) {
  const AutotuningConfig& a = autotuning_config(cfg);
  const int64_t tp = parallel::tensor_parallel_config(cfg).autotp_size;
  TS_CHECK(a.mp_size == 1 || a.mp_size == tp, cfg.source, ": 'autotuning.mp_size' is ", a.mp_size,
           ", but tensor_parallel.autotp_size is ", tp, " (the model-parallel ranks it tunes for)");
  TS_CHECK(cfg.train_batch_size >= a.min_train_batch_size &&
               (a.max_train_batch_size == 0 || cfg.train_batch_size <= a.max_train_batch_size),
           cfg.source, ": train_batch_size ", cfg.train_batch_size,
           " is outside autotuning's [min_train_batch_size, max_train_batch_size] (",
           a.min_train_batch_size, ", ", a.max_train_batch_size,
           "): Tessera tunes the micro-batch at the config's train batch");
}

const io::RegisterConfigSection<AutotuningConfig> kAutotuningSection{"autotuning",
                                                                     check_autotuning};

}  // namespace

}  // namespace tessera::experiment
