// The search methods behind make_search_method (search_method.h). Private to experiment/.
#pragma once
#include <map>
#include <set>
#include <string>

#include "tessera/experiment/search_method.h"

namespace tessera::experiment {

// random (max_trials samples) and single (one).
class RandomSearch : public SearchMethod {
 public:
  RandomSearch(std::shared_ptr<SearchContext> c, int64_t max_trials, int64_t max_concurrent);
  std::vector<Action> initial_trials() override;
  std::vector<Action> trial_exited(int64_t id) override;
  std::vector<Action> trial_exited_early(int64_t id, ExitReason reason) override;
  nlohmann::json snapshot(bool with_context) const override;
  void restore(const nlohmann::json& state, bool with_context) override;

 private:
  int64_t max_trials_, max_concurrent_, created_ = 0, pending_ = 0;
};

class GridSearch : public SearchMethod {
 public:
  // The grid is counted here (an error before the experiment exists) and built when it starts.
  GridSearch(std::shared_ptr<SearchContext> c, int64_t max_concurrent, int64_t max_points);
  std::vector<Action> initial_trials() override;
  std::vector<Action> trial_exited(int64_t id) override;
  nlohmann::json snapshot(bool with_context) const override;
  void restore(const nlohmann::json& state, bool with_context) override;

 private:
  Action next();
  int64_t max_concurrent_, max_points_, pending_ = 0;
  std::vector<nlohmann::json> remaining_;  // created from the back, as Determined
};

// Asynchronous successive halving that stops trials (Determined's asha_stopping).
class AsyncHalvingSearch : public SearchMethod {
 public:
  AsyncHalvingSearch(std::shared_ptr<SearchContext> c, int64_t num_rungs, double divisor,
                     int64_t max_length, int64_t max_trials, int64_t max_concurrent,
                     bool smaller_is_better);
  std::vector<Action> initial_trials() override;
  std::vector<Action> trial_created(int64_t id) override;
  std::vector<Action> validation_completed(int64_t id, int64_t length, double metric) override;
  std::vector<Action> trial_exited(int64_t id) override;
  std::vector<Action> trial_exited_early(int64_t id, ExitReason reason) override;
  nlohmann::json snapshot(bool with_context) const override;
  void restore(const nlohmann::json& state, bool with_context) override;

 private:
  struct Rung {
    int64_t units_needed = 0;
    std::vector<std::pair<int64_t, double>> metrics;  // (trial, metric), ascending
    size_t insert(int64_t id, double metric);
  };
  std::vector<Action> early_stopping(int64_t id, int64_t length, double metric);
  int64_t num_rungs_, max_trials_, max_concurrent_;
  double divisor_;
  bool smaller_is_better_;
  std::vector<Rung> rungs_;
  std::map<int64_t, int64_t> trial_rungs_;  // trial -> its current rung
  std::set<int64_t> early_exits_;
  int64_t completed_ = 0, invalid_ = 0;
};

// Sub-searches side by side; each trial belongs to the one that created it.
class TournamentSearch : public SearchMethod {
 public:
  TournamentSearch(std::shared_ptr<SearchContext> c,
                   std::vector<std::unique_ptr<SearchMethod>> subs);
  std::vector<Action> initial_trials() override;
  std::vector<Action> trial_created(int64_t id) override;
  std::vector<Action> validation_completed(int64_t id, int64_t length, double metric) override;
  std::vector<Action> trial_exited(int64_t id) override;
  std::vector<Action> trial_exited_early(int64_t id, ExitReason reason) override;
  nlohmann::json snapshot(bool with_context) const override;
  void restore(const nlohmann::json& state, bool with_context) override;

 private:
  SearchMethod& owner(int64_t id);
  std::vector<Action> mark(size_t sub, std::vector<Action> actions);
  std::vector<std::unique_ptr<SearchMethod>> subs_;
  std::map<int64_t, size_t> table_;
};

// Optuna's TPE sampler as a searcher (beyond Determined): the first n_startup_trials random,
// then each new trial's hyperparameters drawn one by one from the Parzen estimator of the best
// gamma fraction of the finished trials (at most 25), as the best of n_ei_candidates by l(x) /
// g(x) against the estimator of the others. A trial's result is its last validation.
class TPESearch : public SearchMethod {
 public:
  struct Options {
    int64_t max_trials = 1, max_concurrent = 16, n_startup_trials = 10, n_ei_candidates = 24;
    double gamma = 0.1, prior_weight = 1.0;
    bool smaller_is_better = true;
  };
  TPESearch(std::shared_ptr<SearchContext> c, Options options);
  std::vector<Action> initial_trials() override;
  std::vector<Action> validation_completed(int64_t id, int64_t length, double metric) override;
  std::vector<Action> trial_exited(int64_t id) override;
  std::vector<Action> trial_exited_early(int64_t id, ExitReason reason) override;
  nlohmann::json snapshot(bool with_context) const override;
  void restore(const nlohmann::json& state, bool with_context) override;

 private:
  Action next();
  nlohmann::json suggest();
  Options options_;
  int64_t created_ = 0, pending_ = 0;
  std::map<int64_t, nlohmann::json> hparams_;                    // of every created trial
  std::map<int64_t, double> last_metric_;                        // of trials still running
  std::vector<std::pair<nlohmann::json, double>> observations_;  // finished: (hparams, metric)
};

}  // namespace tessera::experiment
