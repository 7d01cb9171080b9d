// Runs backward through the recorded graph.
#pragma once
#include <vector>

#include "tessera/tensor.h"

namespace tessera::autograd {

// Backward from `roots` with the given output gradients (undefined: ones for scalars).
// Frees saved tensors unless retain_graph, so a second pass is then an error.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
              bool retain_graph = false);

}  // namespace tessera::autograd
