// Megatron's conjugate functions (f/g, scatter/gather along the last dimension) as custom
// autograd functions, and the column- and row-parallel linear layers built on them.
#include "tessera/parallel/tensor_parallel.h"

#include "dim_collectives.h"

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/sequence_parallel.h"
#include "tessera/parallel/tensor_parallel_layout.h"
#include "tessera/parallel/vocab_parallel.h"

namespace tessera::parallel {

namespace {
constexpr const char* kLastDimSplit = "tensor parallel (the last dimension)";

// The group to split over: none for a null group or a single rank (the layer is plain).
std::shared_ptr<ProcessGroup> split_group(std::shared_ptr<ProcessGroup> g) {
  return g && g->size() > 1 ? std::move(g) : nullptr;
}

// nn::Linear's parameters and initial draws, for a layer with no group to split over.
void make_plain_linear(nn::Module& m, Tensor& weight, Tensor& bias, int64_t in, int64_t out,
                       bool with_bias) {
  m.register_parameter("weight", &weight, Tensor::empty({out, in}));
  if (with_bias) m.register_parameter("bias", &bias, Tensor::empty({out}));
  nn::reset_linear_parameters(weight, bias, in);
}

void check_input(const Tensor& x, int64_t in, const std::string& layer) {
  TS_CHECK(x.dim() >= 1 && x.shape().back() == in, "Linear '", layer, "': expected input [..., ",
           in, "], got ", x.describe());
}
}  // namespace

Tensor copy_to_tensor_parallel_region(const Tensor& x, ProcessGroup& group) {
  return region_function(
      x, "CopyToTensorParallelRegion", [](const Tensor& t) { return t.detach(); },
      [&group](const Tensor& g) { return all_reduced(g, group); });
}

Tensor reduce_from_tensor_parallel_region(const Tensor& x, ProcessGroup& group) {
  return region_function(
      x, "ReduceFromTensorParallelRegion",
      [&group](const Tensor& t) { return all_reduced(t, group); },
      [](const Tensor& g) { return g; });
}

Tensor scatter_to_tensor_parallel_region(const Tensor& x, ProcessGroup& group) {
  return region_function(
      x, "ScatterToTensorParallelRegion",
      [&group](const Tensor& t) { return dim_chunk(t, -1, group, kLastDimSplit); },
      [&group](const Tensor& g) { return dim_gather(g, -1, group); });
}

Tensor gather_from_tensor_parallel_region(const Tensor& x, ProcessGroup& group) {
  return region_function(
      x, "GatherFromTensorParallelRegion",
      [&group](const Tensor& t) { return dim_gather(t, -1, group); },
      [&group](const Tensor& g) { return dim_chunk(g, -1, group, kLastDimSplit); });
}

ColumnParallelLinear::ColumnParallelLinear(nn::Module* parent, const std::string& name, int64_t in,
                                           int64_t out, std::shared_ptr<ProcessGroup> group,
                                           bool gather_output, bool bias, bool sequence_parallel,
                                           int64_t stride)
    : UnaryModule(parent, name),
      in_features(in),
      out_features(out),
      stride(stride),
      gather_output(gather_output),
      sequence_parallel(sequence_parallel),
      group_(split_group(std::move(group))) {
  if (!group_) {  // plain: nn::Linear
    this->sequence_parallel = false;
    out_per_rank = out;
    make_plain_linear(*this, weight, this->bias, in, out, bias);
    return;
  }
  TS_CHECK(!(gather_output && sequence_parallel), "ColumnParallelLinear '", name,
           "': gather_output and sequence_parallel exclude each other");
  TS_CHECK(stride >= 1 && out % stride == 0 && (out / stride) % group_->size() == 0,
           "ColumnParallelLinear '", name, "': ", out, " output features",
           stride > 1 ? " in " + std::to_string(stride) + " fused blocks" : std::string(),
           " do not divide among ", group_->size(), " ranks");
  TS_CHECK(stride == 1 || !gather_output, "ColumnParallelLinear '", name,
           "': a gathered output of fused blocks (stride ", stride,
           ") would interleave the ranks' slices; use gather_output = false");
  out_per_rank = out / group_->size();
  register_parameter("weight", &weight, zeros({out_per_rank, in}));
  if (bias) register_parameter("bias", &this->bias, zeros({out_per_rank}));
}

void ColumnParallelLinear::load_from_full(const Tensor& w, const Tensor& b) {
  TS_CHECK(w.shape() == Shape({out_features, in_features}), "ColumnParallelLinear '", name(),
           "': the whole weight must be [", out_features, ", ", in_features, "], got ",
           w.describe());
  NoGradGuard no_grad;
  const TensorParallelSplit split{0, stride, out_features};
  const int rank = group_ ? group_->rank() : 0, ranks = group_ ? group_->size() : 1;
  weight.copy_(shard_of_whole(w, split, rank, ranks));
  if (bias.defined() && b.defined()) bias.copy_(shard_of_whole(b, split, rank, ranks));
}

TensorParallelLayout ColumnParallelLinear::tensor_parallel_splits() const {
  if (!group_) return {};
  TensorParallelLayout out{{"weight", {0, stride, out_features}}};
  if (bias.defined()) out["bias"] = {0, stride, out_features};
  return out;
}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  nn::ModuleScope scope(*this);
  if (!group_) {
    check_input(x, in_features, name());
    return gemm(x, weight, bias);
  }
  const Tensor y = sequence_parallel
                       ? sequence_parallel_linear(x, weight, bias, *group_, fp8)
                       : gemm(copy_to_tensor_parallel_region(x, *group_), weight, bias);
  return gather_output ? gather_from_tensor_parallel_region(y, *group_) : y;
}

RowParallelLinear::RowParallelLinear(nn::Module* parent, const std::string& name, int64_t in,
                                     int64_t out, std::shared_ptr<ProcessGroup> group,
                                     bool input_is_parallel, bool bias, bool sequence_parallel)
    : UnaryModule(parent, name),
      in_features(in),
      out_features(out),
      input_is_parallel(input_is_parallel),
      sequence_parallel(sequence_parallel),
      group_(split_group(std::move(group))) {
  if (!group_) {  // plain: nn::Linear
    this->sequence_parallel = false;
    in_per_rank = in;
    make_plain_linear(*this, weight, this->bias, in, out, bias);
    return;
  }
  TS_CHECK(input_is_parallel || !sequence_parallel, "RowParallelLinear '", name,
           "': sequence_parallel needs input_is_parallel (a column-parallel layer's output)");
  TS_CHECK(in % group_->size() == 0, "RowParallelLinear '", name, "': ", in,
           " input features do not divide among ", group_->size(), " ranks");
  in_per_rank = in / group_->size();
  register_parameter("weight", &weight, zeros({out, in_per_rank}));
  if (bias) register_parameter("bias", &this->bias, zeros({out}));
}

void RowParallelLinear::load_from_full(const Tensor& w, const Tensor& b) {
  TS_CHECK(w.shape() == Shape({out_features, in_features}), "RowParallelLinear '", name(),
           "': the whole weight must be [", out_features, ", ", in_features, "], got ",
           w.describe());
  NoGradGuard no_grad;
  weight.copy_(w.narrow(1, (group_ ? group_->rank() : 0) * in_per_rank, in_per_rank));
  if (bias.defined() && b.defined()) bias.copy_(b);
}

TensorParallelLayout RowParallelLinear::tensor_parallel_splits() const {
  if (!group_) return {};
  return {{"weight", {1, 1, in_features}}};
}

Tensor RowParallelLinear::forward(const Tensor& x) {
  nn::ModuleScope scope(*this);
  if (!group_) {
    check_input(x, in_features, name());
    return gemm(x, weight, bias);
  }
  const Tensor xin = input_is_parallel ? x : scatter_to_tensor_parallel_region(x, *group_);
  return reduced(gemm(xin, weight, {}));
}

Tensor RowParallelLinear::forward_of_gelu(const Tensor& x, GeluApprox approximate,
                                          bool recompute_gelu) {
  if (!recompute_gelu) return forward(gelu(x, approximate));
  TS_CHECK(!fp8, "RowParallelLinear '", name(),
           "': GELU recomputed in backward (gelu_checkpoint) does not run through FP8");
  nn::ModuleScope scope(*this);
  if (!group_) {
    check_input(x, in_features, name());
    return gelu_linear(x, weight, bias, approximate);
  }
  const Tensor xin = input_is_parallel ? x : scatter_to_tensor_parallel_region(x, *group_);
  return reduced(gelu_linear(xin, weight, {}, approximate));
}

Tensor RowParallelLinear::reduced(const Tensor& partial) {
  if (!sequence_parallel) {
    const Tensor y = reduce_from_tensor_parallel_region(partial, *group_);
    return bias.defined() ? y + bias : y;
  }
  const Tensor y = reduce_scatter_to_sequence_parallel_region(partial, *group_);
  return bias.defined() ? y + sequence_parallel_weight(bias, *group_) : y;
}

Tensor ColumnParallelLinear::joined_forward(const std::vector<ColumnParallelLinear*>& layers,
                                            const Tensor& x) {
  TS_CHECK(!layers.empty(), "ColumnParallelLinear::joined_forward: no layers");
  const ColumnParallelLinear& first = *layers.front();
  std::vector<Tensor> weights, biases;
  for (const ColumnParallelLinear* l : layers) {
    TS_CHECK(l->group_ == first.group_ && l->in_features == first.in_features &&
                 l->sequence_parallel == first.sequence_parallel && !l->gather_output &&
                 l->bias.defined() == first.bias.defined(),
             "ColumnParallelLinear::joined_forward: ", l->name(), " differs from ", first.name(),
             " (group, in_features, sequence_parallel, bias) or gathers its output");
    TS_CHECK(!l->fp8, "ColumnParallelLinear::joined_forward: ", l->name(),
             " runs through FP8, which joined layers do not");
    weights.push_back(l->weight);
    if (l->bias.defined()) biases.push_back(l->bias);
  }
  const Tensor w = cat(weights, 0), b = biases.empty() ? Tensor() : cat(biases, 0);
  if (!first.group_) {
    check_input(x, first.in_features, first.name());
    return linear(x, w, b);
  }
  return first.sequence_parallel ? sequence_parallel_linear(x, w, b, *first.group_)
                                 : linear(copy_to_tensor_parallel_region(x, *first.group_), w, b);
}

std::vector<Tensor*> tensor_parallel_shards(nn::Module& model) {
  const TensorParallelLayout layout = tensor_parallel_layout(model);
  std::vector<Tensor*> out;
  for (auto& [name, t] : model.named_parameters())
    if (layout.count(name)) out.push_back(t);
  return out;
}

}  // namespace tessera::parallel
