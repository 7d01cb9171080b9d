// Activation checkpointing: run `fn` keeping no activations inside it; during backward,
// run it again (same RNG stream and sequence shard, so dropout matches) and backpropagate
// through the rerun. Outside grad mode (evaluation) `fn` simply runs.
#pragma once
#include <functional>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// How the inputs kept for the rerun are stored: `pack` turns an input into what is kept (a
// shard, a host copy), `unpack` brings it back, given the input's shape and device, before
// the rerun; identity when unset. `on_forward` / `on_recompute` are told the seconds each run
// of fn took (profiling).
struct CheckpointHooks {
  std::function<Tensor(const Tensor& input)> pack;
  std::function<Tensor(const Tensor& kept, const Shape& shape, Device device)> unpack;
  std::function<void(double seconds)> on_forward, on_recompute;
};

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointHooks& hooks = {});

}  // namespace tessera::autograd
