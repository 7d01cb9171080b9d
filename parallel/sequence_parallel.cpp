// Megatron-SP's communication functions along the sequence dimension, as autograd functions.
#include "tessera/parallel/sequence_parallel.h"

#include "dim_collectives.h"

#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::parallel {

namespace {
constexpr const char* kWhat = "sequence parallel (the sequence)";
}  // namespace

Tensor scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim) {
  return region_function(
      x, "ScatterToSequenceParallelRegion",
      [&group, dim](const Tensor& t) { return dim_chunk(t, dim, group, kWhat); },
      [&group, dim](const Tensor& g) { return dim_gather(g, dim, group); });
}

Tensor gather_from_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim) {
  return region_function(
      x, "GatherFromSequenceParallelRegion",
      [&group, dim](const Tensor& t) { return dim_gather(t, dim, group); },
      [&group, dim](const Tensor& g) { return dim_reduce_scatter(g, dim, group, kWhat); });
}

Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group,
                                                  int64_t dim) {
  return region_function(
      x, "ReduceScatterToSequenceParallelRegion",
      [&group, dim](const Tensor& t) { return dim_reduce_scatter(t, dim, group, kWhat); },
      [&group, dim](const Tensor& g) { return dim_gather(g, dim, group); });
}

void allreduce_sequence_parallel_grads(const std::vector<Tensor>& params, ProcessGroup& group) {
  NoGradGuard no_grad;
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    TS_CHECK(g.is_contiguous(), "allreduce_sequence_parallel_grads: a non-contiguous gradient");
    group.all_reduce(g);
  }
}

}  // namespace tessera::parallel
