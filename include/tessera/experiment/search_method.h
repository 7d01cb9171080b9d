// Determined's search methods as a library (no processes): a searcher is told what happens to
// its trials (created, validated at some length with its metric, exited) and answers with
// actions: create a trial with these hyperparameters, stop that trial. The experiment runner
// carries the actions out. Every decision depends only on the events and the experiment seed,
// so the same events give the same samples and decisions; snapshot()/restore() carry the state
// across a restart of the runner.
//   single: one trial. random: max_trials samples, at most max_concurrent_trials at a time.
//   grid: every grid point (hparam_sampling.h). async_halving: ASHA that stops trials (rungs at
//   max_length / divisor^k; a trial reaching a rung continues only in the top 1/divisor of the
//   rung's metrics so far, or as the rung's best while it has fewer than divisor). adaptive_asha:
//   brackets of async_halving with 1..max_rungs rungs by `mode`, trials split between them.
//   tpe: Optuna's TPE sampler (searchers.h says how).
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "tessera/experiment/hparam_sampling.h"

namespace tessera::experiment {

struct Action {
  enum Kind { Create, Stop } kind = Create;
  int64_t request_id = 0;  // the trial (ids count from 1 in creation order)
  nlohmann::json hparams;  // Create: the trial's hyperparameters
  bool operator==(const Action& o) const {
    return kind == o.kind && request_id == o.request_id && hparams == o.hparams;
  }
};

// Why a trial ended before the searcher stopped it or it reached max_length.
enum class ExitReason { Errored, UserCanceled, InvalidHP };

// What the searchers of one experiment share: the hyperparameter space, the random stream and
// the next request id.
struct SearchContext {
  HParams hparams;
  SearchRandom random;
  int64_t next_id = 1;
  Action create(nlohmann::json hparams_sample);  // the next id
  Action create_sampled() { return create(sample_hparams(hparams, random)); }
};

class SearchMethod {
 public:
  explicit SearchMethod(std::shared_ptr<SearchContext> context) : context_(std::move(context)) {}
  virtual ~SearchMethod() = default;
  virtual std::vector<Action> initial_trials() = 0;
  virtual std::vector<Action> trial_created(int64_t /*id*/) { return {}; }
  // Trial `id` validated after `length` units of max_length with searcher metric `metric`.
  virtual std::vector<Action> validation_completed(int64_t /*id*/, int64_t /*length*/,
                                                   double /*metric*/) {
    return {};
  }
  // The trial ended: reached max_length, or stopped by the searcher.
  virtual std::vector<Action> trial_exited(int64_t /*id*/) { return {}; }
  virtual std::vector<Action> trial_exited_early(int64_t /*id*/, ExitReason /*reason*/) {
    return {};
  }
  // The state (the shared context included when `with_context`), and back.
  virtual nlohmann::json snapshot(bool with_context = true) const = 0;
  virtual void restore(const nlohmann::json& state, bool with_context = true) = 0;

 protected:
  nlohmann::json context_state() const;
  void restore_context(const nlohmann::json& state);
  std::shared_ptr<SearchContext> context_;
};

// The searcher of `config` (its searcher section and hyperparameters), seeded with the
// experiment seed.
std::unique_ptr<SearchMethod> make_search_method(const trial::ExperimentConfig& config);

// ASHA's rungs: units (of max_length) a trial needs to enter rung i of `num_rungs`:
// max(1, max_length / divisor^(num_rungs - 1 - i)).
std::vector<int64_t> asha_rung_lengths(int64_t num_rungs, double divisor, int64_t max_length);

// adaptive_asha's brackets: {num_rungs, max_trials, max_concurrent_trials} per bracket, most
// aggressive first, as Determined splits them.
struct Bracket {
  int64_t num_rungs = 1, max_trials = 1, max_concurrent_trials = 0;
};
std::vector<Bracket> adaptive_asha_brackets(const trial::ExperimentConfig::Searcher& searcher,
                                            int64_t max_length);

}  // namespace tessera::experiment
