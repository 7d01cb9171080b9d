// `tessera trial EXP.yaml`: the built-in GPT-2 and BERT models as a Determined DeepSpeedTrial
// (entrypoint: builtin:gpt2 | builtin:bert). hyperparameters.config names a `tessera train`
// config; every other hyperparameter whose name is a dotted config key (optimizer.params.lr,
// model.dropout) overrides it through overwrite_deepspeed_config. The trial reports `loss`
// per training micro-batch and `validation_loss` per validation (train.eval_iters batches).
#include <chrono>
#include <filesystem>
#include <iostream>

#include "cli.h"
#include "tessera/cuda.h"
#include "tessera/experiment/autotuning_config.h"
#include "tessera/io/files.h"
#include "tessera/launch/job.h"
#include "tessera/launch/train_data.h"
#include "tessera/models/model_registry.h"
#include "tessera/trial/deepspeed_config.h"
#include "tessera/trial/run.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

const char* kTrialHelp =
    R"(usage: tessera trial EXP.yaml [--trial-id N] [--hparams JSON] [--device cpu|cuda] [--json]
                     [--quiet]
       mpirun -np N tessera trial EXP.yaml      (resources.slots_per_trial: N)

Trains a built-in model as one Determined trial: the experiment config (Determined's YAML)
says how long (searcher.max_length), how often to validate and checkpoint, and where the
trial's files go (checkpoint_storage.host_path/<name>/trial_<id>). Stopped by SIGTERM or
SIGINT, it checkpoints and exits 0; the same command then continues bit for bit.

  entrypoint: builtin:gpt2 (builtin:<model.type> for each registered model: gpt2, bert)
  hyperparameters:
    config: configs/quickstart.json     # a `tessera train` config (relative to EXP.yaml)
    optimizer.params.lr: 0.001          # dotted config keys override the config
    model.dropout: 0.1
  searcher: {name: single, metric: validation_loss, max_length: {batches: 500}}

The config's layout is the trial's: tensor_parallel.autotp_size, pipeline.stages or both (3D)
take their share of the slots, as under `tessera train`. The config's train_batch_size is the
trial's batch (hyperparameters.global_batch_size, if
given, must equal it). Metrics: loss (each training micro-batch), validation_loss (the mean of
train.eval_iters validation batches). --json: the last line is {"trial_id", "batches",
"state", "validation_metrics", "checkpoint"}.
)";

using models::Batch;

// An io::BatchSource as one slot's loader, with epochs of `epoch_len` batches.
class SourceLoader : public trial::SlotLoader<Batch> {
 public:
  SourceLoader(std::unique_ptr<io::BatchSource<Batch>> source, int64_t epoch_len)
      : source_(std::move(source)), epoch_len_(epoch_len) {}
  int64_t size() const override { return epoch_len_; }
  std::optional<Batch> next() override {
    if (in_epoch_ == epoch_len_) {
      in_epoch_ = 0;
      return std::nullopt;
    }
    ++in_epoch_;
    return source_->next();
  }
  nlohmann::json state() const override {
    return {{"source", source_->state()}, {"in_epoch", in_epoch_}};
  }
  void set_state(const nlohmann::json& state) override {
    source_->set_state(state.at("source"));
    in_epoch_ = state.at("in_epoch").get<int64_t>();
  }

 private:
  std::unique_ptr<io::BatchSource<Batch>> source_;
  int64_t epoch_len_, in_epoch_ = 0;
};

// autotuning (experiment/autotuner.h): the wall time of batches [start_profile_step,
// end_profile_step), reported with each validation as "throughput" (samples/s) and "latency"
// (s per step) once measured. Off unless the config's autotuning section is enabled.
class ProfileWindow {
 public:
  void configure(const io::TrainConfig& cfg) {
    const experiment::AutotuningConfig& a = experiment::autotuning_config(cfg);
    on_ = a.enabled, first_ = a.start_profile_step, last_ = a.end_profile_step - 1;
    cuda_ = Device::parse(cfg.train.device).is_cuda();
  }
  void begin(int64_t batch) {
    if (on_ && batch == first_) start_ = now();
  }
  void end(int64_t batch) {
    if (on_ && batch == last_) seconds_ = std::chrono::duration<double>(now() - start_).count();
  }
  void report(trial::Metrics& m, int64_t batch_size) const {
    if (!on_ || seconds_ <= 0) return;
    const double steps = static_cast<double>(last_ - first_ + 1);
    m["throughput"] = steps * static_cast<double>(batch_size) / seconds_;
    m["latency"] = seconds_ / steps;
  }

 private:
  std::chrono::steady_clock::time_point now() const {
    if (cuda_) cuda_synchronize();  // (the work queued so far is in the time)
    return std::chrono::steady_clock::now();
  }
  bool on_ = false, cuda_ = false;
  int64_t first_ = 0, last_ = 0;
  std::chrono::steady_clock::time_point start_;
  double seconds_ = 0;
};

class BuiltinTrial : public trial::DeepSpeedTrial<Batch> {
 public:
  explicit BuiltinTrial(trial::DeepSpeedTrialContext& c) : DeepSpeedTrial(c) {
    const auto& exp = c.get_experiment_config();
    const std::string kind = exp.entrypoint.substr(8);  // builtin:<model.type>
    TS_CHECK(c.get_hparams().count("config"),
             "the built-in trials need 'hyperparameters.config': the path of a `tessera train` "
             "config");
    TS_CHECK(c.get_hparam("config").is_string(), "'hyperparameters.config' must be a path");
    fs::path path = c.get_hparam("config").get<std::string>();
    if (path.is_relative() && !exp.path.empty()) path = fs::path(exp.path).parent_path() / path;
    TS_CHECK(fs::is_regular_file(path), "hyperparameters.config: no file ",
             io::quoted(path.string()),
             " (a relative path is relative to the experiment config's directory)");
    const nlohmann::json overrides =
        trial::overrides_from_hparams(c.get_hparams(), {"config", "global_batch_size"});
    const nlohmann::json merged = trial::overwrite_deepspeed_config(path.string(), overrides);
    // The slots are the job's world: tensor parallelism takes its share of them.
    io::TrainConfig cfg = launch::parse_config(merged.dump(), c.distributed.size, path.string());
    if (c.distributed.is_chief())
      for (const auto& w : cfg.warnings) std::cerr << "warning: " << w << "\n";
    TS_CHECK(cfg.model.type == kind, "entrypoint ", exp.entrypoint, " but ", path.string(),
             " has model.type '", cfg.model.type, "'");
    if (c.device().is_cuda()) cfg.train.device = "cuda";
    if (c.get_hparams().count("global_batch_size"))
      TS_CHECK(c.get_hparam("global_batch_size") == cfg.train_batch_size,
               "hyperparameters.global_batch_size (", c.get_hparam("global_batch_size").dump(),
               ") differs from the config's train_batch_size (", cfg.train_batch_size, ")");
    job_ = launch::build(std::move(cfg), c.group_ptr());
    profile_.configure(job_->config);
    // Every rank of a model replica reads its batches (a pipeline's first and last stages
    // use them); one rank of each replica reports (a pipeline's loss is on every stage).
    const bool first_of_replica =
        (!job_->groups.tensor || job_->groups.tensor->rank() == 0) && job_->groups.stage == 0;
    if (job_->groups.tensor || job_->is_pipeline())
      c.set_mpu({.data_parallel_rank = job_->data_rank(),
                 .data_parallel_world_size = job_->data_size(),
                 .should_report_metrics = first_of_replica,
                 .should_build_data_loader = true});
    if (job_->is_pipeline()) {
      // A pipeline's train_batch runs all of a batch's micro-batches; the trial saves and
      // restores this stage's engine (it holds the stage's state under the whole model's names).
      c.disable_auto_grad_accumulation();
      engine_ = c.wrap_model_engine(
          std::shared_ptr<engine::Engine>(job_->pipeline_engine, &job_->stage_engine()));
    } else {
      engine_ = c.wrap_model_engine(job_->engine);
    }
  }

  trial::DataLoader<Batch> build_training_data_loader() override {
    return trial::DataLoader<Batch>([this](int rank, int world) {
      auto source = launch::train_batches(cfg(), corpus(), rank, world);
      // (curriculum_learning: cut to the engine's step's length, as `tessera train` does)
      if (job_->engine)
        source = launch::curriculum_batches(std::move(source), *job_->engine, cfg());
      // An epoch: the training split's windows once (GPT); BERT's stream has no end, so its
      // epoch is as many batches as the split has blocks.
      const int64_t epoch = source->epoch_batches().value_or(
          std::max<int64_t>(1, corpus().train->size() / (cfg().model.block_size + 1) /
                                   (cfg().micro_batch_size * world)));
      std::unique_ptr<trial::SlotLoader<Batch>> slot =
          std::make_unique<SourceLoader>(std::move(source), epoch);
      return slot;
    });
  }
  trial::DataLoader<Batch> build_validation_data_loader() override {
    return trial::DataLoader<Batch>([this](int rank, int world) {
      std::unique_ptr<trial::SlotLoader<Batch>> slot = std::make_unique<SourceLoader>(
          launch::val_batches(cfg(), corpus(), rank, world), cfg().train.eval_iters);
      return slot;
    });
  }
  trial::BatchMetrics train_batch(trial::DataLoaderIterator<Batch>& it, int64_t,
                                  int64_t batch) override {
    profile_.begin(batch);
    if (job_->is_pipeline()) {
      const double loss =
          job_->pipeline_engine->train_batch([&] { return job_->pipe_micro_batch(it.next()); });
      profile_.end(batch);
      return {{"loss", loss}};
    }
    const Tensor loss = engine_->forward(it.next());
    engine_->backward(loss);
    engine_->step();
    profile_.end(batch);
    return {{"loss", loss}};
  }
  trial::BatchMetrics evaluate_batch(trial::DataLoaderIterator<Batch>& it, int64_t) override {
    trial::Metrics m;
    if (job_->is_pipeline())  // (one micro-batch through the stages)
      m["validation_loss"] =
          trial::MetricValue(job_->pipeline_engine->eval_batch(
                                 [&] { return job_->pipe_micro_batch(it.next()); }, 1))
              .value();
    else
      m["validation_loss"] = trial::MetricValue(engine_->forward(it.next())).value();
    profile_.report(m, cfg().train_batch_size);
    return m;
  }
  // The tokenizer beside the engine's checkpoint, so `tessera export CKPT --tag model0` works.
  void save(trial::DeepSpeedTrialContext&, const std::string& path) override {
    for (const auto& entry : job_->tokenizer_files()) {
      const std::string& text = entry.second;  // (clang 14: no structured binding in a lambda)
      const fs::path file = fs::path(path) / "model0" / entry.first;
      fs::create_directories(file.parent_path());
      io::write_file_atomically(file.string(), [&](std::ostream& out) { out << text; });
    }
  }

 private:
  const io::TrainConfig& cfg() const { return job_->config; }
  const io::TokenizedCorpus& corpus() const { return job_->corpus; }

  std::unique_ptr<launch::Job> job_;
  std::shared_ptr<engine::Engine> engine_;
  ProfileWindow profile_;
};

}  // namespace

int trial_main(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << kTrialHelp;
      return 0;
    }
  // Checked before any slot starts: the entrypoint is one of the built-in trials.
  auto builtin_entrypoint = [](const trial::ExperimentConfig& exp) {
    const std::string& e = exp.entrypoint;
    TS_CHECK(e.rfind("builtin:", 0) == 0 && models::has_model(e.substr(8)), exp.path,
             ": entrypoint '", e, "': tessera trial runs the built-in trials (",
             models::registered_model_list("builtin:"),
             "); a trial of your own is a program of its own (trial::run<MyTrial>, see "
             "docs/trials.md)");
  };
  return trial::run_trial_main(argc - 1, argv + 1, trial::run_trial<BuiltinTrial>, "tessera trial",
                               builtin_entrypoint);
}

}  // namespace tessera::cli
