// The vocabulary split across a tensor-parallel group, Megatron-LM's way: an embedding whose
// rows (tokens) are split, and a cross-entropy over logits whose last dimension is split, that
// never gathers the whole vocabulary on any rank. Both reproduce one process's numbers.
#pragma once
#include <memory>

#include "tessera/nn/layers.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/tensor_parallel_layout.h"

namespace tessera::parallel {

// An embedding of `num_embeddings` rows split across the group: rank r holds rows
// [r * P/N, (r + 1) * P/N) of the vocabulary padded to P, the next multiple of N (Megatron's
// padding; padding rows are zero and never looked up). Each rank looks up the ids in its
// range (zero rows elsewhere) and the ranks' results are all-reduced, so every rank gets the
// whole lookup; the gradient of each row reaches only the rank that holds it. `weight`
// [P/N, dim] is also the weight of a tied, vocabulary-parallel LM head (vocab_parallel_logits).
// sequence_parallel: the lookups are reduce-scattered over the sequence (dim 1) instead, each
// rank getting its chunk of the whole lookup. A null group, or one of a single rank, makes it
// nn::Embedding (the same parameter, initial draw and op; the head's logits plain too).
class VocabParallelEmbedding : public nn::UnaryModule, public TensorParallelModule {
 public:
  VocabParallelEmbedding(nn::Module* parent, const std::string& name, int64_t num_embeddings,
                         int64_t dim, std::shared_ptr<ProcessGroup> group,
                         bool sequence_parallel = false);
  Tensor forward(const Tensor& ids) override;
  std::string type_name() const override { return group_ ? "VocabParallelEmbedding" : "Embedding"; }
  TensorParallelLayout tensor_parallel_splits() const override;  // weight: vocabulary rows
  ProcessGroup* group() const { return group_.get(); }           // null: not split
  // Takes this rank's rows of a whole embedding [num_embeddings, dim].
  void load_from_full(const Tensor& weight);
  Tensor weight;
  int64_t num_embeddings, padded_embeddings, dim, vocab_start, vocab_per_rank;
  bool sequence_parallel;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// The tied LM head's logits for this rank's vocabulary columns, [..., P/N] (Megatron's
// parallel_lm_logits): hidden enters the parallel region (identity forward, all-reduce of its
// gradient backward, since each rank's columns contribute part of it). Padding columns are
// -inf, so they take no probability. sequence_parallel: `hidden` is this rank's chunk of the
// sequence, all-gathered first (its gradient reduce-scattered back), as Megatron's head does.
Tensor vocab_parallel_logits(const Tensor& hidden, const VocabParallelEmbedding& embedding,
                             bool sequence_parallel = false);

// The whole logits [..., num_embeddings] on every rank from this rank's columns (the ranks'
// gathered, the padding dropped); a plain embedding's logits as they are.
Tensor whole_vocab_logits(const Tensor& local_logits, const VocabParallelEmbedding& embedding);

// cross_entropy(whole logits, targets, ignore_index) (the mean over targets that are not
// ignored; NaN when all are, as torch) from this rank's logit columns `local_logits`
// [..., V/N] (vocabulary [r * V/N, (r + 1) * V/N), V possibly padded): the row maximum, the sum of
// exponentials and the target's logit are all-reduced (Megatron's three all-reduces of one value
// per row). Every rank passes the same targets and gets the same loss; the gradient of its columns
// is softmax - one-hot, computed from its own columns.
Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& targets,
                                    ProcessGroup& group, int64_t ignore_index = -100);

}  // namespace tessera::parallel
