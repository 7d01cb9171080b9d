#include "tessera/parallel/grad_norm.h"

#include "tessera/optim/optimizer.h"

namespace tessera::parallel {

double global_grad_norm(GradSquares s, const GradNormGroups& g, bool float64_gradients) {
  // Each collective only where a group exists: one process (and data parallelism without
  // ZeRO, whose ranks hold the same averaged gradients) communicates nothing.
  double total = 0.0;
  if (g.tensor) {  // the shards' squares meet over the tensor group, the replicas' do not
    if (g.partition) {
      s.tensor_parallel = g.partition->all_reduce_scalar(s.tensor_parallel);
      s.replicated = g.partition->all_reduce_scalar(s.replicated);
    }
    total = g.tensor->all_reduce_scalar(s.tensor_parallel) + s.replicated;
  } else {
    total = s.tensor_parallel + s.replicated;
    if (g.partition) total = g.partition->all_reduce_scalar(total);
  }
  total += g.expert ? g.expert->all_reduce_scalar(s.expert) : s.expert;
  if (g.pipe) total = g.pipe->all_reduce_scalar(total);
  return optim::norm_from_squares(total, float64_gradients);
}

}  // namespace tessera::parallel
