// Internal: ZeRO++'s quantized gradient reduction (qgZ, zero_quantized_gradients), DeepSpeed's
// all_to_all_quant_reduce: in place of a reduce-scatter over W = N nodes x L ranks, each rank
// quantizes the chunks bound for the ranks of each node to int4 blocks and sends them, in one
// all-to-all inside its node, to the local rank with the same index; each sums what its L
// node mates sent (in float32), quantizes the sums to int4 again and sends them, in one
// all-to-all across the nodes, to the rank of each node that owns them, which sums the N
// parts. Every rank ends with the sum of its chunk (as the reduce-scatter it replaces), having
// sent an eighth of float32's bytes inside its node and an eighth of one node's share across.
//
// Nodes are consecutive blocks of L ranks of the group, L the processes per host (the
// launcher's local size; TESSERA_PROCESSES_PER_HOST overrides it). With one node the
// reduce-scatter stays unquantized, as DeepSpeed's does.
#pragma once
#include <memory>

#include "tessera/parallel/process_group.h"

namespace tessera::parallel {

class QuantizedReduceScatter {
 public:
  // Elements per int4 block, one float32 scale each (1/16 more bytes than the codes): 512
  // kept 20 steps of a small GPT-2 within 1.5% of the unquantized losses, 128 within 0.6%.
  static constexpr int64_t kBlock = 128;

  // The groups of `group` (collective: every rank of it calls this); null when the group is
  // on one node or the node size does not divide it (`why` says which).
  static std::shared_ptr<QuantizedReduceScatter> make(const std::shared_ptr<ProcessGroup>& group,
                                                      int ranks_per_node, std::string* why);
  // `in` [W * n] (chunk q for rank q), `out` [n]: the sum of every rank's chunk for this rank.
  void run(Tensor out, const Tensor& in);

  int nodes() const { return nodes_; }
  int ranks_per_node() const { return local_; }

 private:
  QuantizedReduceScatter() = default;
  std::shared_ptr<ProcessGroup> intra_, inter_;  // this rank's node; same index on each node
  int nodes_ = 1, local_ = 1;
};

}  // namespace tessera::parallel
