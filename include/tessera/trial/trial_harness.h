// The single-trial harness (Determined's _PyTorchTrialController and _DeepSpeedTrialController):
// trains a trial to searcher.max_length, reporting training metrics every scheduling_unit
// batches, validating every min_validation_period and at the end, checkpointing every
// min_checkpoint_period, after validations as checkpoint_policy says, and at the end. A stop
// (SIGINT/SIGTERM on any slot, or context.set_stop_requested(true)) ends training at the next
// optimizer-step boundary with a checkpoint; running the trial again resumes from the trial's
// latest checkpoint and continues bit for bit as if it had not stopped.
//
// A trial's files, TRIAL_DIR = <checkpoint_storage.host_path>/<storage_path>/<name>/trial_<id>:
//   checkpoints/<uuid>/   state.json (harness state, data position, RNG, schedulers,
//                         callbacks), model<i>.safetensors and optimizer<i>.safetensors
//                         (Trial) or model0/ (DeepSpeedTrial: the engine's checkpoint), and
//                         whatever the trial's save() writes
//   checkpoints.json      the checkpoints kept (save_trial_best / save_trial_latest) and the
//                         latest
//   metrics.jsonl         one JSON object per training report and validation
//   tensorboard/          the same metrics as TensorBoard scalars (Determined/<name>)
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/trial/callback.h"
#include "tessera/trial/reducer.h"
#include "tessera/trial/trial.h"
#include "tessera/trial/trial_context.h"

namespace tessera::trial {

struct HarnessOptions {
  // SIGINT/SIGTERM stop with a checkpoint: the harness installs the handlers (false: a caller
  // that installed engine::StopSignals itself; its signals still stop the trial).
  bool handle_signals = true;
  bool quiet = false;  // no progress lines
  // The searcher's decision after a validation before the end (the experiment runner's ASHA
  // stopping a trial at a rung): the harness marks such validations "awaits_decision" in
  // metrics.jsonl and asks this on the chief, all slots then stopping (with a checkpoint,
  // state STOPPED) or continuing alike. Unset: no validation waits.
  std::function<bool()> searcher_stops;
};

struct TrialResult {
  int64_t trial_id = 0;
  int64_t batches = 0;
  std::string state;                                             // "COMPLETED" or "STOPPED"
  nlohmann::json validation_metrics = nlohmann::json::object();  // the last validation's
  std::string checkpoint;  // the latest checkpoint's directory ("" if none)
  // {"trial_id", "batches", "state", "validation_metrics", "checkpoint"}
  nlohmann::json to_json() const;
};

// What differs between trial kinds and batch types; TrialRunnerFor<T> implements it.
class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  virtual Callbacks& callbacks() = 0;
  virtual void build_data_loaders() = 0;
  // Batches (train_batch units) per epoch of this slot's training loader (0: no loader).
  virtual int64_t local_epoch_length() = 0;
  // One batch: appends each metrics map it reports, adds its records.
  virtual void train_batch(int64_t epoch_idx, int64_t batch_idx, std::vector<Metrics>& metrics,
                           int64_t& records) = 0;
  struct Evaluation {
    bool full_dataset = false;
    std::vector<Metrics> batch_metrics;  // evaluate_batch's on this slot
    nlohmann::json metrics;              // evaluate_full_dataset's (chief)
    int64_t records = 0;
    EvaluationReducer reducer = Reducer::AVG;
  };
  virtual Evaluation evaluate() = 0;
  virtual nlohmann::json data_state() const = 0;
  virtual void set_data_state(const nlohmann::json& state) = 0;
  virtual void save_user_state(const std::string& dir) = 0;
  virtual void load_user_state(const std::string& dir) = 0;
  virtual bool reports_metrics() const { return true; }
};

class TrialHarness {
 public:
  TrialHarness(TrialContext& context, TrialRunner& runner, HarnessOptions options = {});
  ~TrialHarness();
  TrialResult run();

  struct State {  // Determined's _TrialState
    int64_t batches_trained = 0, epochs_trained = 0;
    int64_t last_ckpt = -1, last_val = -1;
    std::optional<double> best_validation;
  };

 private:
  struct Run;
  TrialContext& context_;
  TrialRunner& runner_;
  HarnessOptions options_;
};

// TRIAL_DIR for the experiment and trial (see above).
std::string trial_directory(const ExperimentConfig& config, int64_t trial_id);

}  // namespace tessera::trial
