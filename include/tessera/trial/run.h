// A user's trial as a program (Determined's entrypoint), run on one experiment config:
//
//   int main(int argc, char** argv) { return tessera::trial::run<MyTrial>(argc, argv); }
//
//   ./my_trial EXP.yaml [--trial-id N] [--hparams JSON] [--device cpu|cuda] [--json] [--quiet]
//   mpirun -np 2 ./my_trial EXP.yaml      # resources.slots_per_trial: 2
//
// It trains the trial to searcher.max_length with the experiment's constant hyperparameters
// (--hparams gives values for searched ones and overrides constants), then exits 0, also
// when stopped by SIGTERM/SIGINT (with a checkpoint: run it again to continue). Errors are
// printed and exit 1. --json prints, last, {"trial_id", "batches", "state",
// "validation_metrics", "checkpoint"}.
#pragma once
#include <functional>

#include "tessera/trial/trial_harness.h"
#include "tessera/trial/trial_runner.h"

namespace tessera::trial {

using RunOneTrial = std::function<TrialResult(const TrialInfo& info, const HarnessOptions&)>;

// The command line, the experiment config, the slots and seed, errors: everything but the
// trial's type. `program` names the program in the usage line and errors (default argv[0]);
// `check` sees the experiment config as soon as it is read (e.g. its entrypoint).
using CheckConfig = std::function<void(const ExperimentConfig& config)>;
int run_trial_main(int argc, char** argv, const RunOneTrial& run_one,
                   const std::string& program = "", const CheckConfig& check = {});

// The trial the config describes, trained by the harness (what run<T> runs for each trial).
template <class T>
TrialResult run_trial(const TrialInfo& info, const HarnessOptions& options) {
  typename T::Context context(info);
  T trial(context);
  TrialRunnerFor<T> runner(trial, context);
  TrialHarness harness(context, runner, options);
  return harness.run();
}

template <class T>
int run(int argc, char** argv) {
  return run_trial_main(argc, argv, run_trial<T>);
}

// The hyperparameters of one trial: the config's constants, with `chosen` (a searcher's
// values, or --hparams) for searched ones and as overrides; an error names a searched
// hyperparameter without a value, or a value for one the config does not have.
std::map<std::string, nlohmann::json> trial_hparams(const ExperimentConfig& config,
                                                    const nlohmann::json& chosen);

}  // namespace tessera::trial
