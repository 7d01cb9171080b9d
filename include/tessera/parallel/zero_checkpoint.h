// ZeRO checkpoints: each rank writes its shards (float32 master and optimizer state of its
// partition) to zero_rank<R>.safetensors (with tensor parallelism, zero_rank<R>_tp<T>: the
// data-parallel rank R of tensor-parallel rank T's group; every tp_rank argument below is
// that T, or -1 without tensor parallelism); engine.json's "zero" section records the stage,
// the data-parallel size and every parameter's shape, so the shards can be put back
// together at any other size (or by `tessera zero-to-fp32`).
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/parallel/process_group.h"
#include "tessera/parallel/shard_layout.h"
#include "tessera/tensor.h"

namespace tessera::parallel {

std::string zero_shard_file(int rank, int tp_rank = -1);  // "zero_rank<R>[_tp<T>].safetensors"
nlohmann::json zero_metadata(int stage, const ShardLayout& layout);

struct ConsolidatedState {
  std::map<std::string, Tensor> masters;    // "<param>": float32 master weights
  std::map<std::string, Tensor> optimizer;  // "<param>.<slot>" and "step", as state_dict()
  int stage = 0, world_size = 1;
};
// Reads every shard file of a checkpoint directory (TAG dir) and rebuilds the full tensors.
ConsolidatedState consolidate_zero_checkpoint(const std::string& tag_dir, int tp_rank = -1);

// `rank`'s partition in `layout` (any data-parallel size): masters and optimizer state as
// [shard] tensors zero-padded like ShardLayout's, read only from the parts of the saved
// shard files that overlap it (at the size it was saved with: this rank's own file only).
ConsolidatedState load_zero_partition(const std::string& tag_dir, const ShardLayout& layout,
                                      int rank, int tp_rank = -1);

// The whole masters ("<param>") and optimizer state ("<param>.<slot>") of `layout`'s
// parameters, put together from every rank's `shards` (ZeroOptimizer::shard_state; a
// collective over `group`, the ranks the layout partitions over).
void gather_whole_state(ProcessGroup& group, const ShardLayout& layout,
                        const std::map<std::string, Tensor>& shards,
                        std::map<std::string, Tensor>& masters,
                        std::map<std::string, Tensor>& optimizer);

}  // namespace tessera::parallel
