// A training configuration in DeepSpeed's JSON schema, plus Tessera's "model", "data" and
// "train" sections. Parsing validates everything before any work starts: a wrong type, an
// out-of-range value or an inconsistent batch triple is an Error naming the key, the value
// found and what was expected; unknown keys become warnings naming the key.
#pragma once
#include <algorithm>
#include <any>
#include <chrono>
#include <map>
#include <string>
#include <typeindex>
#include <vector>

#include "tessera/dtype.h"
#include "tessera/io/config_key.h"
#include "tessera/optim/hyper_param.h"

namespace tessera::io {

struct TrainConfig {
  // Batch triple (DeepSpeed's rule): train_batch_size = micro * accumulation * world_size.
  int64_t train_batch_size = 0;
  int64_t micro_batch_size = 0;
  int64_t gradient_accumulation_steps = 0;

  // The optimizer and LR schedule sections: their types and parameters are the registries'
  // (optim/optimizer_registry.h, optim/lr_schedule_registry.h), which hold the defaults.
  struct Optimizer {
    bool present = false;           // the config has an "optimizer" section
    std::string type = "AdamW";     // a registered optimizer type
    optim::HyperParamGiven params;  // optimizer.params as given (checked)
    // The parameters over the entry's defaults.
    optim::HyperParamValues values() const;
    double lr() const { return values().number("lr"); }
    double weight_decay() const { return values().number("weight_decay"); }
    bool weight_decay_1d() const { return values().flag("weight_decay_1d"); }
  } optimizer;

  struct Scheduler {
    std::string type;               // empty: constant lr
    optim::HyperParamGiven params;  // scheduler.params as given (checked)
    std::string warmup_type = "log";
  } scheduler;

  double gradient_clipping = 1.0;     // DeepSpeed's default since 0.19.3 (0 = off)
  bool dataloader_drop_last = false;  // engine.deepspeed_io's loaders drop the last short batch

  struct FP16 {
    bool enabled = false;
    double loss_scale = 0.0;  // 0 = dynamic
    int64_t initial_scale_power = 16;
    int64_t loss_scale_window = 1000;
    int64_t hysteresis = 2;
    bool consecutive_hysteresis = false;
    double min_loss_scale = 1.0;
    bool hysteresis_stated = false;  // hysteresis or consecutive_hysteresis given
  } fp16;
  bool bf16 = false;
  bool amp = false;  // DeepSpeed's (Apex) amp section, trained as fp16 (refused with ZeRO)

  // zero_optimization: parallel::ZeroConfig (parallel/zero_config.h), a section its owner
  // registers (config_section_registry.h): read it with section<parallel::ZeroConfig>().

  // tensor_parallel and pipeline: parallel::TensorParallelConfig and parallel::PipelineConfig
  // (parallel/tensor_parallel_config.h, parallel/pipeline_config.h), registered sections whose
  // ranks per model replica divide the job's ranks (world_size below).

  // activation_checkpointing: parallel::ActivationCheckpointingOptions, a registered section
  // (parallel/activation_checkpointing.h).

  // Data-parallel gradient averaging (DeepSpeed's top-level keys).
  bool prescale_gradients = false;
  double gradient_predivide_factor = 1.0;
  std::string communication_data_type;  // "", "fp32", "fp16", "bf16" ("" = the model's dtype)

  struct CommsLogger {
    bool enabled = false, verbose = false, prof_all = true;
    std::vector<std::string> prof_ops;
  } comms_logger;

  struct Distributed {  // Tessera's: how long a collective may take before the job ends
    double timeout_s = 1800;
    // timeout_s as a duration; values past ~31 years mean "never" (they would overflow it).
    std::chrono::milliseconds timeout() const {
      return std::chrono::milliseconds(static_cast<int64_t>(std::min(timeout_s, 1e9) * 1000.0));
    }
  } distributed;

  int64_t world_size = 1;  // the data-parallel size the batch triple was resolved for (the
                           // ranks given to parse / (autotp_size x pipeline.stages))

  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  bool memory_breakdown = false;  // each rank's memory every steps_per_print steps

  // DeepSpeed's monitor sections (csv_monitor, tensorboard, and any registered with the
  // engine's monitor registry) share their keys: one entry per registered monitor, by its
  // section key, its defaults where the file has none.
  struct Monitor {
    bool enabled = false;
    std::string output_path = "./";
    std::string job_name = "DeepSpeedJobName";
  };
  std::map<std::string, Monitor> monitors;
  // The section of a registered monitor (an unregistered key is an error naming it).
  const Monitor& monitor(const std::string& key) const;
  Monitor& monitor(const std::string& key);
  bool any_monitor_enabled() const;

  // DeepSpeed's flops_profiler: the model profile at one step, on rank 0.
  struct FlopsProfiler {
    bool enabled = false;
    double recompute_fwd_factor = 0.0;  // forward recomputed in backward (activation checkpoints)
    int64_t profile_step = 1;           // the global step (0-based) whose forwards are profiled
    int64_t module_depth = -1;
    int64_t top_modules = 1;
    bool detailed = true;
    std::string output_file;  // empty: standard output
  } flops_profiler;

  // Tessera's trace section: a Chrome trace-event JSON file per rank of the engine's phases,
  // its collectives and (kernels: true) every kernel, over global steps [from, to].
  struct Trace {
    bool enabled = false;
    std::string output_path = "./traces";
    int64_t from = 1, to = 3;  // "steps": [from, to], inclusive, 0-based
    bool kernels = false;
  } trace;

  struct Checkpoint {
    std::string tag_validation = "Warn";
  } checkpoint;

  // ---- Tessera's own sections ----
  struct Model {
    std::string type = "gpt2";  // a registered model (models/model_registry.h)
    std::string size;           // a named size, else the fields below
    int64_t n_layer = 4, n_head = 4, n_embd = 128, block_size = 64;
    int64_t intermediate_size = 0;  // BERT; 0 = 4 * n_embd
    double dropout = 0.0;
    bool bias = true;
    // The layers run as DeepSpeed's transformer kernel, with the "transformer_kernel"
    // section's options (models/transformer_kernel.h)
    bool transformer_kernel = false;
    std::string init_from;  // HF model directory: its config.json is the architecture
    std::vector<std::string> stated_keys;  // the keys the section states (the registry checks)
  } model;

  struct Data {
    std::string path;                // a text file or a directory of text files
    std::string tokenizer = "char";  // char, gpt2 (vocab/merges or tokenizer_file), wordpiece
    std::string vocab, merges;       // vocab: vocab.json (gpt2) or vocab.txt (wordpiece)
    bool lower_case = true;          // wordpiece: lower-case and strip accents (uncased BERT)
    std::string tokenizer_file;      // HF tokenizer.json (byte-level BPE) instead of vocab/merges
    double val_fraction = 0.1;
    std::string cache_dir;    // where token files go (default: <path>.tessera/)
    double mask_prob = 0.15;  // BERT
    bool nsp = false;         // BERT sentence pairs
    std::vector<std::string> stated_keys;
  } data;

  struct Train {
    int64_t steps = 1000;
    uint64_t seed = 1337;
    int64_t eval_interval = 250;
    int64_t eval_iters = 20;
    int64_t sample_tokens = 300;
    std::string checkpoint_dir;
    int64_t checkpoint_interval = 0;
    int64_t keep_last = 0;       // step<N> checkpoints kept per directory (0: all)
    std::string device = "cpu";  // cpu, cuda or cuda:N
  } train;

  // The sections higher layers own, by their struct's type (config_section_registry.h); every
  // registered section is here after parse(), its defaults when the file leaves it out.
  std::map<std::type_index, std::any> sections;
  template <class T>
  const T& section() const {
    const auto it = sections.find(typeid(T));
    if (it == sections.end()) {
      static const T defaults{};  // (a config built in code, not parsed)
      return defaults;
    }
    return std::any_cast<const T&>(it->second);
  }
  template <class T>
  T& section() {
    std::any& value = sections[typeid(T)];
    if (!value.has_value()) value = T{};
    return std::any_cast<T&>(value);
  }

  std::vector<std::string> warnings;
  // Keys nobody reads (with the known key each most likely meant). Warnings by default; errors
  // with Tessera's top-level "strict": true, or refuse_unknown_keys() (`--strict`).
  std::vector<std::string> unknown_keys;
  bool strict = false;
  std::string source;  // the file (or name) it was parsed from
  void refuse_unknown_keys() const;

  // world_size: the job's ranks (divided by tensor_parallel.autotp_size and pipeline.stages:
  // the data-parallel ranks). `source` names the file in messages.
  static TrainConfig parse(const std::string& json_text, int64_t world_size = 1,
                           const std::string& source = "config");
  static TrainConfig from_file(const std::string& path, int64_t world_size = 1);
  // Every key the reader takes (the registered sections' and monitors' too), with its kind,
  // default and what a value must be, recorded from the reader itself (config_key.h); the
  // parameters under optimizer.params and scheduler.params are their registries' (`tessera
  // optimizers`, `tessera schedules`).
  static std::vector<config::ConfigKey> describe_keys();

  // The dtype the model computes and keeps its weights in (bf16 or fp16 training, else
  // float32), and the one gradients travel in (communication_data_type, else the model's).
  DType model_dtype() const;
  DType communication_dtype() const;
};

}  // namespace tessera::io
