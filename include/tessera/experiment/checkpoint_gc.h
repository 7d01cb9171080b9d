// Determined's checkpoint garbage collection for an experiment: once a trial has ended, its
// checkpoints that no rule of checkpoint_storage keeps are deleted. Kept: each trial's
// save_trial_latest newest and save_trial_best best (by the searcher metric of the validation
// at the checkpoint's batch), and the save_experiment_best best of the whole experiment. (While
// a trial runs, the trial itself keeps its latest checkpoint too, for a restart.)
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/experiment/experiment_store.h"
#include "tessera/trial/experiment_config.h"

namespace tessera::experiment {

struct TrialCheckpoints {
  bool ended = false;  // the trial's state is final: its checkpoints may be collected
  std::vector<CheckpointRecord> checkpoints;
};

// The uuids to delete (checkpoints of ended trials only), for the experiment's trials.
std::vector<std::string> checkpoints_to_delete(const std::vector<TrialCheckpoints>& trials,
                                               const trial::ExperimentConfig& config);

}  // namespace tessera::experiment
