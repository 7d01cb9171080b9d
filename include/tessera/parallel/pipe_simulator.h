// Replays every stage's instruction stream (pipe_schedule.h) with given costs, to check a
// schedule before it runs: each stage executes its instructions in order; a compute pass takes
// its cost; a send takes none and a receive waits for its matching send (the k-th send of that
// kind from the peer stage: activations go to stage + 1, gradients to stage - 1, modulo the
// stage count for interleaved schedules). A receive no send matches (a deadlock) or a send no
// one receives is an error naming the stage and instruction.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/parallel/pipe_schedule.h"

namespace tessera::parallel {

struct PipeCosts {
  double forward = 1, backward = 1, backward_input = 1, backward_weight = 1;
};

struct PipeSimulation {
  double makespan = 0;
  std::vector<double> busy;             // compute time per stage
  std::vector<int64_t> peak_in_flight;  // micro-batches between forward and (input) backward
  int64_t messages = 0;                 // matched send/receive pairs
  double bubble(size_t stage) const { return 1.0 - busy.at(stage) / makespan; }
  double bubble_fraction() const;  // idle share of all stages' time until the last finishes
};

PipeSimulation simulate_pipeline(const std::vector<std::vector<PipeStep>>& streams,
                                 const PipeCosts& costs = {});

// Every stage's steps of a schedule kind: make(stage) builds stage `stage`'s schedule.
template <class Make>
std::vector<std::vector<PipeStep>> pipeline_streams(int64_t stages, Make make) {
  std::vector<std::vector<PipeStep>> out;
  for (int64_t s = 0; s < stages; ++s) out.push_back(make(s).steps());
  return out;
}

}  // namespace tessera::parallel
