// An experiment checked whole before it exists: its searcher (grid size included), and for
// the built-in trials the `tessera train` config every trial would read, parsed once with one
// sample of the hyperparameters. A hyperparameter path that no config key matches is an error
// naming the closest key, not a grid of identical trials.
#pragma once
#include "tessera/trial/experiment_config.h"

namespace tessera::experiment {

void validate_experiment(const trial::ExperimentConfig& config);

}  // namespace tessera::experiment
