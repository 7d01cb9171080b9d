// Sequence parallelism (Megatron-SP, Korthikanti et al. 2022): outside the tensor-parallel
// regions (LayerNorm, dropout, residual adds) each rank of the tensor-parallel group holds
// 1/N of the sequence, so those activations take 1/N of the memory. A column-parallel layer
// all-gathers the sequence before its GEMM and a row-parallel one reduce-scatters its
// output over the sequence instead of all-reducing it (ColumnParallelLinear /
// RowParallelLinear with sequence_parallel = true). `dim` is the sequence dimension: 1 for the
// [B, T, C] activations of the built-in models.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "tessera/autograd/fp8_linear.h"
#include "tessera/nn/layers.h"
#include "tessera/parallel/process_group.h"
#include "tessera/rng.h"
#include "tessera/tensor.h"

namespace tessera::parallel {

// This rank's chunk of the sequence forward; the gradient all-gathered backward (enters SP).
Tensor scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim = 1);
// The whole sequence all-gathered forward. Backward (Megatron's tensor_parallel_output_grad):
// true, the gradient reduce-scattered (the input of a column-parallel layer or of the
// vocabulary-parallel head, whose ranks each contribute part of it); false, this rank's chunk
// of it (a replicated consumer that every rank computes alike, e.g. BERT's pooler).
Tensor gather_from_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim = 1,
                                            bool tensor_parallel_output_grad = true);
// linear(gather_from_sequence_parallel_region(x), weight, bias) keeping only this rank's
// chunk x for backward, as Megatron's linear with sequence parallelism: backward all-gathers
// the chunk again for the weight's gradient, so the saved input is 1/N of the gathered one.
// The gradient of x is the reduce-scatter of the whole input's gradient.
// fp8: the GEMM through fp8_linear (fp8_layers.h), forward and again in backward.
Tensor sequence_parallel_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                ProcessGroup& group,
                                const std::shared_ptr<Fp8LinearScaling>& fp8 = nullptr);
// The ranks' partial sums reduce-scattered over the sequence forward; the gradient
// all-gathered backward (the output of a row-parallel layer).
Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group,
                                                  int64_t dim = 1);

// A parameter replicated across the group but applied to this rank's sequence chunk
// (LayerNorm weights, a row-parallel layer's bias, position embeddings): identity forward; its
// gradient summed over the group backward, so every rank's copy receives the whole gradient
// without a separate step (the built-in models and RowParallelLinear use it; one small
// all-reduce per parameter and backward, where Megatron buckets them before the step).
Tensor sequence_parallel_weight(const Tensor& param, ProcessGroup& group);

// The positions of this rank's chunk of a `length`-token sequence split over `group`
// ([r L/N, (r + 1) L/N), int64; all L positions with a null group). A length that does not
// divide is an error naming `what` (the model).
Tensor sequence_parallel_positions(int64_t length, const ProcessGroup* group, Device device,
                                   const std::string& what);

// While it lives, dropout draws this rank's chunk of one process's masks (a SequenceShardGuard
// over `sequence_group`); with a null group (no sequence parallelism) it does nothing.
class SequenceShardScope {
 public:
  explicit SequenceShardScope(const ProcessGroup* sequence_group) {
    if (sequence_group) guard_.emplace(sequence_group->rank(), sequence_group->size());
  }

 private:
  std::optional<SequenceShardGuard> guard_;
};

// A LayerNorm applied to this rank's sequence chunk: its weight and bias are replicated and go
// through sequence_parallel_weight. With a null group it is an nn::LayerNorm.
class SequenceParallelLayerNorm : public nn::LayerNorm {
 public:
  SequenceParallelLayerNorm(nn::Module* parent, const std::string& name, int64_t dim, double eps,
                            bool affine, bool bias, std::shared_ptr<ProcessGroup> group);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// The other way: parameters applied to sequence chunks directly receive each rank's part of
// their gradient; this sums them over the group (as Megatron does before the optimizer step).
void allreduce_sequence_parallel_grads(const std::vector<Tensor>& params, ProcessGroup& group);

}  // namespace tessera::parallel
