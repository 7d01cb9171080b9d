// A small trial for the harness tests: y = 2x - 1 + 0.3 sin(5x) fitted by a 1-16-1 MLP with
// dropout (so the RNG state matters on resume), SGD with momentum, over 64 training and 24
// validation points. Hooks record what the harness calls.
#pragma once
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tessera/nn/layers.h"
#include "tessera/ops.h"
#include "tessera/rng.h"
#include "tessera/trial/run.h"

namespace regression {

namespace ts = tessera;
namespace trial = tessera::trial;

struct Rows {
  ts::Tensor x, y;  // [n, 1]
  int64_t size() const { return x.size(0); }
};

inline Rows collate(std::vector<double> xs) {
  std::vector<double> ys;
  for (double x : xs) ys.push_back(2 * x - 1 + 0.3 * std::sin(5 * x));
  const int64_t n = static_cast<int64_t>(xs.size());
  return {ts::from_vector(xs, {n, 1}), ts::from_vector(ys, {n, 1})};
}

inline std::shared_ptr<ts::io::Dataset<double>> points(int64_t n, uint64_t seed) {
  return std::make_shared<ts::io::FunctionDataset<double>>(n, [seed](int64_t i) {
    return ts::philox_uniform_f64(seed, static_cast<uint64_t>(i)) * 2 - 1;
  });
}

struct Net : ts::nn::Module {
  ts::nn::Linear fc1{this, "fc1", 1, 16};
  ts::nn::Linear fc2{this, "fc2", 16, 1};
  ts::Tensor forward(const ts::Tensor& x) {
    return fc2(ts::dropout(ts::tanh(fc1(x)), 0.1, is_training()));
  }
};

// What the tests observe, shared with the callback.
struct Log {
  std::vector<std::string> hooks;                      // hook names in call order
  std::vector<int64_t> validations;                    // batches trained at each validation
  std::vector<int64_t> checkpoints;                    // ... at each checkpoint written
  std::vector<double> train_losses;                    // every batch's loss on this slot
  int64_t stop_at = -1;                                // set_stop_requested after this many batches
  std::function<void(trial::TrialContext&)> on_batch;  // after each train_batch
  std::function<void(trial::TrialContext&)> on_construct;  // at the end of the constructor
  trial::Callbacks extra_callbacks;                        // besides the recorder
};

struct Recorder : trial::PyTorchCallback {
  Recorder(Log& log, trial::TrialContext& c) : log(log), context(c) {}
  void on_trial_startup(int64_t first, const std::optional<std::string>& uuid) override {
    log.hooks.push_back("startup " + std::to_string(first) + (uuid ? " resumed" : " fresh"));
  }
  void on_trial_shutdown() override { log.hooks.push_back("shutdown"); }
  void on_training_start() override { log.hooks.push_back("training_start"); }
  void on_training_epoch_start(int64_t e) override {
    log.hooks.push_back("epoch_start " + std::to_string(e));
  }
  void on_training_epoch_end(int64_t e) override {
    log.hooks.push_back("epoch_end " + std::to_string(e));
  }
  void on_training_workload_end(const nlohmann::json&,
                                const std::vector<nlohmann::json>& b) override {
    log.hooks.push_back("workload_end " + std::to_string(b.size()));
  }
  void on_validation_start() override { log.hooks.push_back("validation_start"); }
  void on_validation_epoch_start() override { log.hooks.push_back("validation_epoch_start"); }
  void on_validation_epoch_end(const std::vector<nlohmann::json>& o) override {
    log.hooks.push_back("validation_epoch_end " + std::to_string(o.size()));
  }
  void on_validation_end(const nlohmann::json& m) override {
    log.hooks.push_back("validation_end");
    log.validations.push_back(context.current_train_batch() + 1);
    CHECK(m.contains("validation_loss"));
  }
  void on_checkpoint_load_start(const nlohmann::json& c) override {
    log.hooks.push_back("checkpoint_load_start " +
                        std::to_string(c["batches_trained"].get<int64_t>()));
  }
  void on_checkpoint_save_start(nlohmann::json& c) override {
    log.hooks.push_back("checkpoint_save_start");
    c["recorder_note"] = "saved";
  }
  void on_checkpoint_write_end(const std::string&) override {
    log.hooks.push_back("checkpoint_write_end");
    log.checkpoints.push_back(context.current_train_batch() + 1);
  }
  void on_checkpoint_upload_end(const std::string&) override {
    log.hooks.push_back("checkpoint_upload_end");
  }
  nlohmann::json state_dict() const override { return {{"validations_seen", seen}}; }
  void load_state_dict(const nlohmann::json& s) override { seen = s["validations_seen"]; }
  int64_t seen = 0;
  Log& log;
  trial::TrialContext& context;
};

struct RegressionTrial : trial::Trial<Rows> {
  static inline Log* log = nullptr;  // the test's (trials are built by the harness)

  explicit RegressionTrial(trial::TrialContext& c) : Trial(c) {
    model = c.wrap_model(std::make_shared<Net>());
    opt = c.wrap_optimizer(std::make_shared<ts::optim::SGD>(
        ts::optim::default_param_groups(model->named_parameters(), c.get_hparam("lr"), 0.0),
        ts::optim::SGDOptions{.momentum = 0.9}));
    if (log && log->on_construct) log->on_construct(c);
  }
  trial::DataLoader<Rows> build_training_data_loader() override {
    return {
        points(64, 7), {.batch_size = context.get_per_slot_batch_size(), .shuffle = true}, collate};
  }
  trial::DataLoader<Rows> build_validation_data_loader() override {
    return {points(24, 8), {.batch_size = context.get_per_slot_batch_size()}, collate};
  }
  trial::BatchMetrics train_batch(const Rows& b, int64_t, int64_t) override {
    const ts::Tensor err = model->forward(b.x) - b.y;
    const ts::Tensor loss = ts::mean(err * err);
    context.backward(loss);
    context.step_optimizer(*opt);
    if (log) {
      log->train_losses.push_back(loss.item());
      if (log->on_batch) log->on_batch(context);
      if (log->stop_at >= 0 && context.current_train_batch() + 1 == log->stop_at)
        context.set_stop_requested(true);
    }
    return loss;
  }
  trial::BatchMetrics evaluate_batch(const Rows& b, int64_t) override {
    const ts::Tensor err = model->forward(b.x) - b.y;
    return {{"validation_loss", ts::mean(err * err)}};
  }
  trial::Callbacks build_callbacks() override {
    if (!log) return {};
    trial::Callbacks all = log->extra_callbacks;
    all["recorder"] = std::make_shared<Recorder>(*log, context);
    return all;
  }

  std::shared_ptr<Net> model;
  std::shared_ptr<ts::optim::SGD> opt;
};

// An experiment config for the regression trial; `extra` is appended (YAML).
inline std::string config_yaml(const std::string& storage, int64_t batches,
                               const std::string& extra = "") {
  return "name: regression\n"
         "hyperparameters:\n  global_batch_size: 8\n  lr: 0.05\n"
         "searcher:\n  name: single\n  metric: validation_loss\n  max_length:\n    batches: " +
         std::to_string(batches) +
         "\ncheckpoint_storage:\n  type: shared_fs\n  host_path: " + storage + "\n" + extra;
}

// One trial run of `yaml` on `group` (trial id 1, seed 1), as trial::run does it.
inline trial::TrialResult run_yaml(const std::string& yaml,
                                   std::shared_ptr<ts::parallel::ProcessGroup> group,
                                   const nlohmann::json& hparams = nullptr) {
  trial::TrialInfo info;
  info.config = trial::ExperimentConfig::parse(yaml, "exp.yaml");
  info.hparams = trial::trial_hparams(info.config, hparams);
  info.trial_id = 1;
  info.trial_seed = 1;
  info.trial_dir = trial::trial_directory(info.config, 1);
  info.group = group;
  ts::set_data_parallel_shard(group->rank(), group->size());
  ts::manual_seed(info.trial_seed);
  trial::HarnessOptions options;
  options.quiet = true;
  options.handle_signals = false;
  const auto r = trial::run_trial<RegressionTrial>(info, options);
  ts::set_data_parallel_shard(0, 1);
  return r;
}

}  // namespace regression
