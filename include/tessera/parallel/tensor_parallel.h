// Tensor parallelism, Megatron-LM's way: the conjugate communication functions as autograd
// functions over a tensor-parallel group, and the layers built on them. A column-parallel
// layer holds a slice of the output features, a row-parallel one a slice of the input
// features; column -> row needs one all-reduce forward and one backward, and reproduces the
// whole layer pair's numbers on one process.
#pragma once
#include <memory>
#include <vector>

#include "tessera/nn/layers.h"
#include "tessera/parallel/fp8_layers.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/tensor_parallel_layout.h"

namespace tessera::parallel {

// f: identity forward, all-reduce of the gradient backward (enters a parallel region).
Tensor copy_to_tensor_parallel_region(const Tensor& x, ProcessGroup& group);
// g: all-reduce forward, identity backward (leaves a row-parallel region).
Tensor reduce_from_tensor_parallel_region(const Tensor& x, ProcessGroup& group);
// This rank's chunk of the last dimension forward; the gradient all-gathered backward.
Tensor scatter_to_tensor_parallel_region(const Tensor& x, ProcessGroup& group);
// The ranks' chunks concatenated along the last dimension forward; split backward.
Tensor gather_from_tensor_parallel_region(const Tensor& x, ProcessGroup& group);

// Y = X A^T + b with A's output rows split across the group: this rank holds rows
// [r * out/N, (r + 1) * out/N) of A and of b. gather_output: every rank gets all of Y;
// otherwise its slice (to feed a RowParallelLinear). sequence_parallel: X is this rank's
// chunk of the sequence (dim 1), all-gathered before the GEMM (sequence_parallel.h); not with
// gather_output. stride (Megatron's): the output features are `stride` fused blocks (GPT-2's
// q|k|v: 3), each split on its own, so a rank holds its slice of every block.
// A null group, or one of a single rank, makes it nn::Linear: the same parameters, initial
// draws and op, no communication (parallel_context.h: one model definition for every layout).
class ColumnParallelLinear : public nn::UnaryModule,
                             public TensorParallelModule,
                             public Fp8GemmLayer {
 public:
  ColumnParallelLinear(nn::Module* parent, const std::string& name, int64_t in, int64_t out,
                       std::shared_ptr<ProcessGroup> group, bool gather_output = true,
                       bool bias = true, bool sequence_parallel = false, int64_t stride = 1);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return group_ ? "ColumnParallelLinear" : "Linear"; }
  TensorParallelLayout tensor_parallel_splits() const override;  // weight and bias: rows
  // Takes this rank's rows of a whole layer's weight [out, in] and bias [out].
  void load_from_full(const Tensor& weight, const Tensor& bias = {});
  // The layers' outputs side by side ([..., sum of their out_per_rank]) from one GEMM over
  // their weights joined (DeepSpeed's QKV projection as one GEMM); the layers take the same
  // input over the same group, and none gathers its output nor runs through FP8.
  static Tensor joined_forward(const std::vector<ColumnParallelLinear*>& layers, const Tensor& x);
  Tensor weight, bias;
  int64_t in_features, out_features, out_per_rank, stride;
  bool gather_output, sequence_parallel;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// Y = X A^T + b with A's input columns split: this rank holds columns
// [r * in/N, (r + 1) * in/N). input_is_parallel: X is already this rank's slice (a column-
// parallel layer's output); otherwise it is split here. The partial products are all-reduced
// and the whole bias added once. sequence_parallel: the partial products are reduce-scattered
// over the sequence (dim 1) instead, each rank getting its chunk (needs input_is_parallel);
// the bias, added to the chunk, goes through sequence_parallel_weight, so its gradient
// arrives whole on every rank. A null group, or one of a single rank: nn::Linear, as above.
class RowParallelLinear : public nn::UnaryModule, public TensorParallelModule, public Fp8GemmLayer {
 public:
  RowParallelLinear(nn::Module* parent, const std::string& name, int64_t in, int64_t out,
                    std::shared_ptr<ProcessGroup> group, bool input_is_parallel = false,
                    bool bias = true, bool sequence_parallel = false);
  Tensor forward(const Tensor& x) override;
  // forward(gelu(x)); recompute_gelu keeps x for backward instead of gelu(x) (gelu_linear:
  // DeepSpeed's gelu_checkpoint), the same values and gradients. Not with FP8 (an error).
  Tensor forward_of_gelu(const Tensor& x, GeluApprox approximate, bool recompute_gelu);
  std::string type_name() const override { return group_ ? "RowParallelLinear" : "Linear"; }
  TensorParallelLayout tensor_parallel_splits() const override;  // weight: columns
  void load_from_full(const Tensor& weight, const Tensor& bias = {});
  Tensor weight, bias;
  int64_t in_features, out_features, in_per_rank;
  bool input_is_parallel, sequence_parallel;

 private:
  Tensor reduced(const Tensor& partial);  // the partial products summed, the bias added
  std::shared_ptr<ProcessGroup> group_;
};

// The parameter slots of `model` that hold a shard (differ across the tensor-parallel ranks):
// column-parallel weights and biases, row-parallel weights, vocabulary-parallel embeddings
// (tensor_parallel_layout.h says how each is cut). Everything else is replicated. A global
// gradient norm sums the shards' squares over the group and counts the replicated
// parameters once.
std::vector<Tensor*> tensor_parallel_shards(nn::Module& model);

}  // namespace tessera::parallel
