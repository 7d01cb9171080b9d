// Collectives along one dimension of a tensor, and the one-input autograd function the
// tensor- and sequence-parallel regions are built from. Private to parallel/.
#pragma once
#include <functional>

#include "tessera/parallel/process_group.h"
#include "tessera/tensor.h"

namespace tessera::parallel {

// A new tensor holding the reduction of every rank's x (x itself is left as it is).
Tensor all_reduced(const Tensor& x, ProcessGroup& group, ReduceOp op = ReduceOp::Sum);
// This rank's chunk of dimension `dim` (negative counts from the end), contiguous; `what`
// names the caller in the error when the dimension does not divide among the ranks.
Tensor dim_chunk(const Tensor& x, int64_t dim, ProcessGroup& group, const char* what);
// Every rank's x concatenated along `dim`.
Tensor dim_gather(const Tensor& x, int64_t dim, ProcessGroup& group);
// The ranks' x summed, this rank receiving its chunk of `dim`.
Tensor dim_reduce_scatter(const Tensor& x, int64_t dim, ProcessGroup& group, const char* what);

// forward(x) recorded with backward(gradient) as its gradient function.
using RegionFn = std::function<Tensor(const Tensor&)>;
Tensor region_function(const Tensor& x, const char* name, RegionFn forward, RegionFn backward);

}  // namespace tessera::parallel
