// The groups and the exchange of expert parallelism (moe.h).
#include "tessera/parallel/expert_parallel.h"
#include "dim_collectives.h"

namespace tessera::parallel {

ExpertParallelGroups make_expert_parallel_groups(ProcessGroup& data_parallel, int ep_size) {
  const int world = data_parallel.size();
  TS_CHECK(ep_size >= 1 && world % ep_size == 0, "moe.ep_size: ", ep_size, " must divide the ",
           world, " data-parallel ranks");
  ExpertParallelGroups g;
  // Every rank takes part in creating every group, in the same order.
  for (int first = 0; first < world; first += ep_size) {
    std::vector<int> ranks;
    for (int r = first; r < first + ep_size; ++r) ranks.push_back(r);
    if (auto group = data_parallel.new_group(ranks)) g.expert_parallel = group;
  }
  for (int offset = 0; offset < ep_size; ++offset) {
    std::vector<int> ranks;
    for (int r = offset; r < world; r += ep_size) ranks.push_back(r);
    if (auto group = data_parallel.new_group(ranks)) g.expert_data_parallel = group;
  }
  return g;
}

Tensor all_to_all_first_dim(const Tensor& x, ProcessGroup& group) {
  const auto exchange = [&group](const Tensor& t) {
    TS_CHECK(t.dim() >= 1 && t.shape()[0] % group.size() == 0, "MoE all_to_all: ", t.describe(),
             "'s first dimension does not divide among ", group.size(), " ranks");
    const Tensor in = t.detach().contiguous();
    Tensor out = Tensor::empty(in.shape(), in.dtype(), in.device());
    group.all_to_all(out.view({out.numel()}), in.view({in.numel()}));
    return out;
  };
  // The exchange is its own inverse: chunk r went to rank r and comes back from it.
  return region_function(x, "AllToAll", exchange, exchange);
}

}  // namespace tessera::parallel
