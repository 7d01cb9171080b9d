// Activation checkpointing: run `fn` keeping no activations inside it; during backward,
// run it again (same RNG stream, so dropout matches) and backpropagate through the rerun.
#pragma once
#include <functional>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

}  // namespace tessera::autograd
