// What a model is built over, Megatron-style: the tensor-parallel group and whether the
// activations between tensor-parallel regions are split over the sequence. A model is written
// once against it; with no group, or a group of one rank, its parallel layers are the plain
// ones (the same parameters, draws and ops as nn::Linear / nn::Embedding), so the same
// definition serves one process, tensor parallelism, sequence parallelism and pipeline stages.
//
//   models::GPT2LMHeadModel whole(config);                      // one process
//   models::GPT2LMHeadModel shard(config, {tp_group, true});    // TP + SP, this rank's shards
#pragma once
#include <memory>

#include "tessera/parallel/expert_parallel.h"
#include "tessera/parallel/process_group.h"

namespace tessera::parallel {

struct ParallelContext {
  std::shared_ptr<ProcessGroup> tensor_parallel;  // null or 1 rank: no tensor parallelism
  bool sequence_parallel = false;                 // Megatron-SP; needs 2 or more ranks
  ExpertParallelGroups experts;                   // MoE layers' experts over ep_size ranks

  // The tensor-parallel group when it has 2 or more ranks, else null (plain layers).
  std::shared_ptr<ProcessGroup> tensor_group() const {
    return tensor_parallel && tensor_parallel->size() > 1 ? tensor_parallel : nullptr;
  }
  // The group activations are split over along the sequence, or null.
  std::shared_ptr<ProcessGroup> sequence_group() const {
    return sequence_parallel ? tensor_group() : nullptr;
  }
  int tensor_parallel_size() const { return tensor_group() ? tensor_parallel->size() : 1; }
  int tensor_parallel_rank() const { return tensor_group() ? tensor_parallel->rank() : 0; }
};

}  // namespace tessera::parallel
