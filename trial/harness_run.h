// The state of one TrialHarness::run(), shared by the loop (trial_harness.cpp) and the
// checkpoints (trial_checkpoints.cpp). Private to the trial layer.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tessera/trial/trial_harness.h"

namespace tessera::trial {

// Thrown out of the training loop when the slots agree to stop (a signal, a stop request).
struct StopTraining {};

struct TrialHarness::Run {
  using Clock = std::chrono::steady_clock;

  Run(TrialContext& context, TrialRunner& runner, HarnessOptions options);

  TrialContext& context;
  TrialRunner& runner;
  HarnessOptions options;
  State state;
  std::string trial_dir;
  bool chief = false;
  int64_t epoch_len = 0, global_batch = 0;
  int64_t total_batches = 0, validation_period = 0, checkpoint_period = 0, report_period = 0;
  nlohmann::json last_validation = nlohmann::json::object();
  std::string latest_checkpoint;  // its directory
  Clock::time_point started;
  int64_t batches_at_start = 0;
  double train_seconds = 0.0;

  // trial_harness.cpp
  // Dropout on or off in the wrapped models and engines.
  void set_training(bool on);
  void train();
  // `await_decision`: the metrics line says the searcher's decision follows (searcher_stops).
  void validate(bool await_decision = false);
  bool searcher_agrees_to_stop();
  void report_training(const std::vector<Metrics>& batch_metrics, int64_t records, double seconds);
  void log(const std::string& line) const;
  bool stop_agreed();
  void step_lr_schedulers(int64_t batch_idx);
  bool validation_current() const { return state.last_val == state.batches_trained; }
  bool checkpoint_current() const { return state.last_ckpt == state.batches_trained; }
  int64_t length_in_batches(const Length& length) const;

  // trial_checkpoints.cpp
  // The latest checkpoint's uuid from checkpoints.json (nullopt: a fresh trial).
  std::optional<std::string> find_latest() const;
  void load(const std::string& uuid);
  // Refuses a checkpoint of another experiment or of other hyperparameters.
  void check_identity(const nlohmann::json& ckpt, const std::string& where) const;
  void checkpoint();
};

}  // namespace tessera::trial
