// Expert parallelism's groups and exchange (DeepSpeed's groups._create_expert_and_data_parallel
// and _AllToAll): a MoE layer's experts are spread over ep_size consecutive ranks of the
// data-parallel group, and each expert is held by world / ep_size ranks.
#pragma once
#include <memory>

#include "tessera/parallel/process_group.h"

namespace tessera::parallel {

// The groups one MoE layout needs: ranks sharing a layer's experts (expert parallel, ep_size
// consecutive ranks of the data-parallel group, as DeepSpeed lays them out) and ranks holding
// the same experts (expert data parallel: ranks r, r + ep_size, ..., which reduce the experts'
// gradients among themselves). Empty: every rank holds every expert.
struct ExpertParallelGroups {
  std::shared_ptr<ProcessGroup> expert_parallel, expert_data_parallel;
  int ep_size() const { return expert_parallel ? expert_parallel->size() : 1; }
  int ep_rank() const { return expert_parallel ? expert_parallel->rank() : 0; }
};
// Collective over `data_parallel`; ep_size must divide its size (the error says so).
ExpertParallelGroups make_expert_parallel_groups(ProcessGroup& data_parallel, int ep_size);

// all_to_all of x's first dimension (size() equal chunks) as an autograd function: its
// gradient is the reverse exchange (DeepSpeed's _AllToAll).
Tensor all_to_all_first_dim(const Tensor& x, ProcessGroup& group);

}  // namespace tessera::parallel
