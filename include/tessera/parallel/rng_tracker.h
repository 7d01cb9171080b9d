// Megatron's / DeepSpeed's model-parallel RNG semantics, for users who want them: named
// generator states (RNGStatesTracker) and model_parallel_cuda_manual_seed, which seeds the
// default generator with `seed` (the same on every tensor-parallel rank: dropout outside the
// parallel regions) and a "model-parallel-rng" state with seed + 2718 + tensor-parallel rank
// (different per rank: dropout inside them). Code under `auto f = tracker.fork();` draws from
// the named state, which then keeps its advance. Tessera's own layers do not need this:
// Philox counters let every rank draw its part of one process's masks (rng.h), which
// reproduces one process; this tracker reproduces Megatron's (valid, not equal) numbers.
// One Philox generator serves every device, so "cuda" in the names is DeepSpeed's only.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "tessera/parallel/process_group.h"
#include "tessera/rng.h"

namespace tessera::parallel {

inline constexpr const char* kModelParallelRngTrackerName = "model-parallel-rng";

class RNGStatesTracker {
 public:
  void reset();
  std::map<std::string, GeneratorState> get_states() const { return states_; }
  void set_states(std::map<std::string, GeneratorState> states) { states_ = std::move(states); }
  // A new state `name` seeded with `seed`; a name or seed already added is an error.
  void add(const std::string& name, uint64_t seed);

  // While alive, the default generator draws from state `name` (which must have been added);
  // at the end that state keeps its advance and the default generator is as it was before.
  class Fork {
   public:
    Fork(RNGStatesTracker& tracker, std::string name);
    ~Fork();
    Fork(const Fork&) = delete;
    Fork& operator=(const Fork&) = delete;

   private:
    RNGStatesTracker& tracker_;
    std::string name_;
    GeneratorState outer_;
  };
  [[nodiscard]] Fork fork(const std::string& name = kModelParallelRngTrackerName) {
    return Fork(*this, name);
  }

 private:
  std::map<std::string, GeneratorState> states_;
};

// The process's tracker (DeepSpeed's get_cuda_rng_tracker).
RNGStatesTracker& get_cuda_rng_tracker();
// DeepSpeed's model_parallel_cuda_manual_seed(seed), the tensor-parallel rank taken from
// `tensor_parallel` (null: rank 0).
void model_parallel_cuda_manual_seed(uint64_t seed, const ProcessGroup* tensor_parallel);

}  // namespace tessera::parallel
