// The experiment runner (what Determined's master does for one experiment, on one machine):
// asks the searcher for trials, runs each as a process (`mpirun -np slots_per_trial` when it
// needs more than one slot) while the slots last (resources.max_slots, default the cores),
// feeds the searcher every validation of its metric and stops the trials it stops (SIGTERM: the
// trial checkpoints and exits), restarts a trial that dies from its latest checkpoint up to
// max_restarts times, and records everything in the store. Pause, activate and kill arrive
// through the store (`tessera experiment pause ID` sets the experiment's state), so any
// process can ask; the runner polls it.
//
// An experiment's files, under the store's directory:
//   experiment_<id>/experiment.json   the YAML's path, the trials' root, the command to run
//   experiment_<id>/runner.lock       held while a runner or any of its trials lives
//   experiment_<id>/runner.log        a detached runner's output
//   experiment_<id>/trial_<r>/        trial r's directory (trial_harness.h), its log in
//                                     trial.log (every restart appended)
// With checkpoint_storage.host_path set, the trial directories go there instead:
// <host_path>/<storage_path>/<name>/experiment_<id>/trial_<r>.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/experiment/experiment_store.h"
#include "tessera/trial/experiment_config.h"

namespace tessera::experiment {

struct RunnerOptions {
  std::string device;         // --device for every trial ("": the trial's default)
  double poll_seconds = 0.2;  // how often trials' files and the store are read
  // Called after something changed (a trial's state, batches or metric), at most once a second.
  std::function<void(int64_t experiment)> on_change;
  std::function<void(const std::string&)> log;  // one line per event (trial started, died...)
};

// The experiment's files (above).
std::string experiment_dir(const std::string& store_dir, int64_t experiment);
// What experiment.json records: the YAML (absolute), the trial command without its arguments,
// the directory holding the trial directories.
struct ExperimentFiles {
  std::string yaml;
  std::vector<std::string> command;
  std::string trials_root;  // checkpoint_storage's host_path/storage_path/experiment_<uuid>
  std::string uuid;         // the experiment's identity; "" for one created before uuids
  std::string trial_dir(int64_t request_id) const;  // trials_root/trial_<request_id>
};
ExperimentFiles read_experiment_files(const std::string& store_dir, int64_t experiment);
std::string trial_dir(const std::string& store_dir, int64_t experiment, int64_t request_id);

// The command line that starts one trial: `program` (the trial command and its arguments)
// under `mpirun -np slots_per_trial` when it needs more than one slot, or with
// resources.scheduler slurm as a Slurm job: `srun --mpi=pmix --ntasks slots --input=0
// --job-name JOB --kill-on-bad-exit=1 [--partition P] [--time T] [--gpus-per-task G]
// [srun_args...] program` (stdin, the searcher's answers, to task 0 only).
std::vector<std::string> trial_command_line(const trial::ExperimentConfig& config,
                                            const std::vector<std::string>& program,
                                            const std::string& job_name);

// Reads and checks the YAML (and its searcher), records the experiment ACTIVE in the store
// with its files under `store_dir`, and returns its id. `tessera` is the program that runs
// builtin: entrypoints (`tessera trial`); any other entrypoint is a trial program (trial/run.h)
// given as a path relative to the YAML or a command on PATH.
int64_t create_experiment(ExperimentStore& store, const std::string& store_dir,
                          const std::string& yaml_path, const std::string& tessera);

// Holds the experiment's runner.lock for its lifetime (the trial processes inherit it).
// Waits up to `wait_seconds` for a previous holder (a killed runner's trials checkpointing);
// still held after that is an error saying the experiment is running.
class RunnerLock {
 public:
  RunnerLock(const std::string& store_dir, int64_t experiment, double wait_seconds);
  ~RunnerLock();
  RunnerLock(const RunnerLock&) = delete;
  RunnerLock& operator=(const RunnerLock&) = delete;
  // Whether some process holds the experiment's lock now (a runner, or a killed runner's
  // trials still stopping).
  static bool held(const std::string& store_dir, int64_t experiment);
  // Whether the runner that last took the lock (its pid is written in it) is alive.
  static bool runner_alive(const std::string& store_dir, int64_t experiment);

 private:
  int fd_ = -1;
};

class ExperimentRunner {
 public:
  // The experiment must be in the store; a runner continues where the last one stopped (its
  // searcher state, trials from their checkpoints). Hold a RunnerLock while it runs.
  ExperimentRunner(ExperimentStore& store, std::string store_dir, int64_t experiment,
                   RunnerOptions options = {});
  ~ExperimentRunner();
  // Runs until the experiment ends (COMPLETED, CANCELED or ERROR, returned), or until the
  // runner gets SIGINT/SIGTERM: its trials then checkpoint and stop, the experiment stays
  // ACTIVE (or PAUSED) and `tessera experiment resume` continues it (returns "ACTIVE").
  std::string run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::experiment
