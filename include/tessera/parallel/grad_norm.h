// The global gradient norm as one process takes it, whatever the layout: each rank sums the
// squares of the gradients it holds (in double), split into tensor-parallel shards and the
// replicated rest; the sums meet over the groups that hold disjoint parts (ZeRO's partitions,
// the tensor-parallel shards, the pipeline's stages) and the root is rounded as
// optim::grad_norm rounds it. The engine (with and without ZeRO, tensor parallel, pipelines)
// clips by this norm alone.
#pragma once
#include "tessera/parallel/process_group.h"

namespace tessera::parallel {

// This rank's squares: of the tensor-parallel shards (summed over the tensor group) and of the
// gradients every tensor-parallel rank holds alike (counted once).
struct GradSquares {
  double tensor_parallel = 0.0, replicated = 0.0;
  double expert = 0.0;  // MoE experts split over the expert-parallel group
};

// The groups over which the squares are summed (each may be null).
struct GradNormGroups {
  ProcessGroup* partition = nullptr;  // ZeRO's data-parallel ranks, each with its partition
  ProcessGroup* tensor = nullptr;     // tensor-parallel ranks, each with its shards
  ProcessGroup* pipe = nullptr;       // pipeline stages, each with its layers
  ProcessGroup* expert = nullptr;     // expert-parallel ranks, each with its experts
};

// sqrt of the squares summed over the groups, rounded to float32 unless the gradients are
// float64 (optim::norm_from_squares).
double global_grad_norm(GradSquares squares, const GradNormGroups& groups,
                        bool float64_gradients = false);

}  // namespace tessera::parallel
