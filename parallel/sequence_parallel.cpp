// Megatron-SP's communication functions along the sequence dimension, as autograd functions.
#include "tessera/parallel/sequence_parallel.h"

#include "dim_collectives.h"

#include "tessera/autograd/backward.h"
#include "tessera/autograd/function.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/tensor_parallel.h"

namespace tessera::parallel {

namespace {
constexpr const char* kSequenceSplit = "sequence parallel (the sequence)";
}  // namespace

Tensor scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim) {
  return region_function(
      x, "ScatterToSequenceParallelRegion",
      [&group, dim](const Tensor& t) { return dim_chunk(t, dim, group, kSequenceSplit); },
      [&group, dim](const Tensor& g) { return dim_gather(g, dim, group); });
}

Tensor gather_from_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim,
                                            bool tensor_parallel_output_grad) {
  return region_function(
      x, "GatherFromSequenceParallelRegion",
      [&group, dim](const Tensor& t) { return dim_gather(t, dim, group); },
      [&group, dim, tensor_parallel_output_grad](const Tensor& g) {
        return tensor_parallel_output_grad ? dim_reduce_scatter(g, dim, group, kSequenceSplit)
                                           : dim_chunk(g, dim, group, kSequenceSplit);
      });
}

Tensor sequence_parallel_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                ProcessGroup& group, const std::shared_ptr<Fp8LinearScaling>& fp8) {
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return autograd::CustomFunction::apply(
      inputs,
      [&group, fp8](autograd::FunctionContext& ctx, const std::vector<Tensor>& in) {
        ctx.save_for_backward(in);
        return std::vector<Tensor>{linear_or_fp8(dim_gather(in[0], 1, group), in[1],
                                                 in.size() > 2 ? in[2] : Tensor(), fp8)};
      },
      [&group, fp8](autograd::FunctionContext& ctx, const std::vector<Tensor>& g) {
        const std::vector<Tensor> saved = ctx.saved();
        // The same linear's gradients on the whole input, as one process computes them.
        std::vector<Tensor> leaves{dim_gather(saved[0], 1, group)};
        for (size_t i = 1; i < saved.size(); ++i) leaves.push_back(saved[i].detach());
        for (Tensor& t : leaves) t.requires_grad_(true);
        {
          GradModeGuard enable(true);
          const Tensor y =
              linear_or_fp8(leaves[0], leaves[1], leaves.size() > 2 ? leaves[2] : Tensor(), fp8);
          autograd::backward({y}, {g[0]});
        }
        std::vector<Tensor> grads{dim_reduce_scatter(leaves[0].grad(), 1, group, kSequenceSplit)};
        for (size_t i = 1; i < leaves.size(); ++i) grads.push_back(leaves[i].grad());
        return grads;
      },
      "SequenceParallelLinear")[0];
}

Tensor sequence_parallel_weight(const Tensor& param, ProcessGroup& group) {
  return copy_to_tensor_parallel_region(param, group);
}

Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group,
                                                  int64_t dim) {
  return region_function(
      x, "ReduceScatterToSequenceParallelRegion",
      [&group, dim](const Tensor& t) { return dim_reduce_scatter(t, dim, group, kSequenceSplit); },
      [&group, dim](const Tensor& g) { return dim_gather(g, dim, group); });
}

Tensor sequence_parallel_positions(int64_t length, const ProcessGroup* group, Device device,
                                   const std::string& what) {
  const int n = group ? group->size() : 1, r = group ? group->rank() : 0;
  TS_CHECK(length % n == 0, what, " sequence parallel: a sequence of ", length,
           " tokens does not divide among ", n, " ranks");
  const int64_t t = length / n;
  return arange(static_cast<double>(r * t), static_cast<double>((r + 1) * t), 1, DType::Int64,
                device);
}

SequenceParallelLayerNorm::SequenceParallelLayerNorm(nn::Module* parent, const std::string& name,
                                                     int64_t dim, double eps, bool affine,
                                                     bool bias, std::shared_ptr<ProcessGroup> group)
    : LayerNorm(parent, name, dim, eps, affine, bias), group_(std::move(group)) {}

Tensor SequenceParallelLayerNorm::forward(const Tensor& x) {
  if (!group_) return LayerNorm::forward(x);
  nn::ModuleScope scope(*this);
  auto shared = [&](const Tensor& p) {
    return p.defined() ? sequence_parallel_weight(p, *group_) : p;
  };
  return invertible ? layer_norm_invertible(x, {dim}, shared(weight), shared(bias), eps)
                    : layer_norm(x, {dim}, shared(weight), shared(bias), eps);
}

void allreduce_sequence_parallel_grads(const std::vector<Tensor>& params, ProcessGroup& group) {
  NoGradGuard no_grad;
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    TS_CHECK(g.is_contiguous(), "allreduce_sequence_parallel_grads: a non-contiguous gradient");
    group.all_reduce(g);
  }
}

}  // namespace tessera::parallel
