#include "tessera/parallel/rng_tracker.h"

#include "tessera/error.h"

namespace tessera::parallel {

void RNGStatesTracker::reset() {
  states_.clear();
}

void RNGStatesTracker::add(const std::string& name, uint64_t seed) {
  TS_CHECK(!states_.count(name), "RNG tracker: state '", name, "' already exists");
  for (const auto& [other, state] : states_)
    TS_CHECK(state.seed != seed, "RNG tracker: seed ", seed, " already exists (state '", other,
             "')");
  states_[name] = {seed, 0};
}

RNGStatesTracker::Fork::Fork(RNGStatesTracker& tracker, std::string name)
    : tracker_(tracker), name_(std::move(name)) {
  auto it = tracker_.states_.find(name_);
  TS_CHECK(it != tracker_.states_.end(), "RNG tracker: state '", name_, "' is not added");
  outer_ = default_generator().state();
  default_generator().set_state(it->second);
}

RNGStatesTracker::Fork::~Fork() {
  tracker_.states_[name_] = default_generator().state();
  default_generator().set_state(outer_);
}

RNGStatesTracker& get_cuda_rng_tracker() {
  static RNGStatesTracker tracker;
  return tracker;
}

void model_parallel_cuda_manual_seed(uint64_t seed, const ProcessGroup* tensor_parallel) {
  const uint64_t rank = tensor_parallel ? static_cast<uint64_t>(tensor_parallel->rank()) : 0;
  RNGStatesTracker& tracker = get_cuda_rng_tracker();
  tracker.reset();
  manual_seed(seed);
  tracker.add(kModelParallelRngTrackerName, seed + 2718 + rank);
}

}  // namespace tessera::parallel
