// Sequence parallelism (Megatron-SP, Korthikanti et al. 2022): outside the tensor-parallel
// regions (LayerNorm, dropout, residual adds) each rank of the tensor-parallel group holds
// 1/N of the sequence, so those activations take 1/N of the memory. A column-parallel layer
// all-gathers the sequence before its GEMM and a row-parallel one reduce-scatters its
// output over the sequence instead of all-reducing it (ColumnParallelLinear /
// RowParallelLinear with sequence_parallel = true). `dim` is the sequence dimension: 1 for the
// [B, T, C] activations of the built-in models.
#pragma once
#include <vector>

#include "tessera/parallel/process_group.h"
#include "tessera/tensor.h"

namespace tessera::parallel {

// This rank's chunk of the sequence forward; the gradient all-gathered backward (enters SP).
Tensor scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim = 1);
// The whole sequence all-gathered forward; the gradient reduce-scattered backward (the
// input of a column-parallel layer, whose ranks each contribute part of it).
Tensor gather_from_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim = 1);
// The ranks' partial sums reduce-scattered over the sequence forward; the gradient
// all-gathered backward (the output of a row-parallel layer).
Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group,
                                                  int64_t dim = 1);

// Parameters replicated across the group but applied to sequence shards (LayerNorm weights,
// a row-parallel layer's bias) receive each rank's part of their gradient: this sums them over
// the group, as Megatron does before the optimizer step.
void allreduce_sequence_parallel_grads(const std::vector<Tensor>& params, ProcessGroup& group);

}  // namespace tessera::parallel
