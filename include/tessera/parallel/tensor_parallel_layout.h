// How a tensor-parallel model's parameters are cut among the ranks, as data: for each split
// parameter, the dimension split, Megatron's stride (a fused weight such as GPT-2's q|k|v
// holds `stride` blocks along that dimension, each split on its own) and the whole length
// (a vocabulary padded to a multiple of the ranks is longer on the ranks). Parameters not in
// the layout are replicated. With it, whole tensors (a one-process model, an HF file) are cut
// into any rank's shards and the shards of any number of ranks are put back together: model
// initialisation, and checkpoints that load at another tensor-parallel size.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/nn/module.h"

namespace tessera::parallel {

struct TensorParallelSplit {
  int64_t dim = 0;
  int64_t stride = 1;
  int64_t size = 0;  // the whole dimension (unpadded)
};

using TensorParallelLayout = std::map<std::string, TensorParallelSplit>;  // by parameter name

// A module whose own parameters are split across a tensor-parallel group says how, by local
// name ("weight"). The parallel layers are such modules; so can a user's module be (a split
// bias, say): its parameters then shard, merge and load across layouts like the layers'.
class TensorParallelModule {
 public:
  virtual ~TensorParallelModule() = default;
  virtual TensorParallelLayout tensor_parallel_splits() const = 0;
};

// The split parameters of `model` (every TensorParallelModule's in it: ColumnParallelLinear's
// weight and bias, RowParallelLinear's weight, VocabParallelEmbedding's weight, ...), by
// state_dict name.
TensorParallelLayout tensor_parallel_layout(nn::Module& model);

nlohmann::json layout_to_json(const TensorParallelLayout& layout);
// `where` names the JSON in errors.
TensorParallelLayout layout_from_json(const nlohmann::json& j, const std::string& where);

// The shape of each rank's shard of a whole tensor of `whole` shape over `size` ranks.
Shape shard_shape(Shape whole, const TensorParallelSplit& split, int size);

// Rank `rank` of `size`'s shard of the whole tensor (zero rows pad a dimension that does not
// divide), and the whole tensor from every rank's shard (padding dropped).
Tensor shard_of_whole(const Tensor& whole, const TensorParallelSplit& split, int rank, int size);
Tensor whole_from_shards(const std::vector<Tensor>& shards, const TensorParallelSplit& split);

// States keyed by parameter name or "<param>.<slot>" (optimizer state; a slot of the
// parameter's shape is split as the parameter is, any other is replicated). Keys not in the
// layout are replicated: the shard state holds them as they are, the merged state takes
// rank 0's.
std::map<std::string, Tensor> shard_state(const std::map<std::string, Tensor>& whole,
                                          const TensorParallelLayout& layout, int rank, int size);
std::map<std::string, Tensor> merge_states(const std::vector<std::map<std::string, Tensor>>& ranks,
                                           const TensorParallelLayout& layout);

// Copies this rank's shard of every parameter (and every buffer) of `whole`'s state into
// `model` (tensor-parallel over `size` ranks). Every parameter must be there.
void load_whole_state(nn::Module& model, const std::map<std::string, Tensor>& whole, int rank,
                      int size);

}  // namespace tessera::parallel
