// The experiment store: one SQLite database (Debian's libsqlite3) holding experiments, their
// trials with hyperparameters, every reported metric (training and validation, with batches
// and timestamps), checkpoints, the searcher's state and every state transition. Each call
// writes in one transaction (WAL journal, synchronous writes), so a process killed at any
// point leaves the database as it was before or after the call, never between.
//   ExperimentStore store("runs/experiments.db");
//   const int64_t e = store.create_experiment("gpt-asha", config_yaml);
//   const int64_t t = store.add_trial(e, /*request_id=*/1, hparams);
//   store.report_validation(t, 100, {{"validation_loss", 2.1}});
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

struct sqlite3;

namespace tessera::experiment {

// Whether an experiment or trial state is final: COMPLETED, CANCELED or ERROR.
bool is_final_state(const std::string& state);

struct TrialRecord {
  int64_t id = 0, experiment_id = 0, request_id = 0;
  std::string state;  // Determined's: ACTIVE, PAUSED, STOPPING_*, COMPLETED, CANCELED, ERROR
  nlohmann::json hparams;
  int64_t batches = 0, restarts = 0;
};

struct ExperimentRecord {
  int64_t id = 0;
  std::string name, state, config;
  nlohmann::json searcher_state;  // null until the searcher saves one
};

struct MetricRecord {
  int64_t trial_id = 0, batches = 0;
  std::string kind;  // "training" or "validation"
  double time = 0;   // seconds since the epoch
  nlohmann::json metrics;
};

struct CheckpointRecord {
  std::string uuid, path;
  int64_t trial_id = 0, batches = 0;
  nlohmann::json metrics;  // the validation metrics at its batch, or null
};

struct TransitionRecord {
  std::string entity;  // "experiment" or "trial"
  int64_t id = 0;
  std::string from, to;
  double time = 0;
};

class ExperimentStore {
 public:
  // Opens (creating, with the schema) the database at `path`; an unreadable file or a database
  // of another schema is an error naming the path.
  explicit ExperimentStore(const std::string& path);
  ExperimentStore(const ExperimentStore&) = delete;
  ExperimentStore& operator=(const ExperimentStore&) = delete;

  int64_t create_experiment(const std::string& name, const std::string& config);
  void set_experiment_state(int64_t experiment, const std::string& state);
  void save_searcher_state(int64_t experiment, const nlohmann::json& state);
  int64_t add_trial(int64_t experiment, int64_t request_id, const nlohmann::json& hparams);
  void set_trial_state(int64_t trial, const std::string& state);
  void count_restart(int64_t trial);
  // A metric report; the trial's batches become `batches` (with the report, atomically).
  void report_training(int64_t trial, int64_t batches, const nlohmann::json& metrics);
  void report_validation(int64_t trial, int64_t batches, const nlohmann::json& metrics);
  void add_checkpoint(const CheckpointRecord& checkpoint);
  void delete_checkpoint(const std::string& uuid);

  std::vector<ExperimentRecord> experiments() const;
  // Each experiment's id, name and state only (no JSON parsed: one bad record cannot hide the
  // others from a listing).
  std::vector<ExperimentRecord> experiment_rows() const;
  ExperimentRecord experiment(int64_t id) const;  // an unknown id is an error
  std::vector<TrialRecord> trials(int64_t experiment) const;
  TrialRecord trial(int64_t id) const;
  std::vector<MetricRecord> metrics(int64_t trial, const std::string& kind = "") const;
  std::vector<CheckpointRecord> checkpoints(int64_t trial) const;
  std::vector<TransitionRecord> transitions(const std::string& entity, int64_t id) const;
  // The best validation of `metric` among a trial's reports (smaller or larger is better).
  std::optional<double> best_validation(int64_t trial, const std::string& metric,
                                        bool smaller_is_better) const;
  // PRAGMA integrity_check's verdict ("ok" when sound) and foreign-key violations found.
  std::string integrity_check() const;

 private:
  class Transaction;
  void report(int64_t trial, int64_t batches, const std::string& kind,
              const nlohmann::json& metrics);
  void transition(const std::string& entity, int64_t id, const std::string& from,
                  const std::string& to);
  struct Close {
    void operator()(sqlite3* db) const;
  };
  std::string path_;
  std::unique_ptr<sqlite3, Close> db_;
};

}  // namespace tessera::experiment
