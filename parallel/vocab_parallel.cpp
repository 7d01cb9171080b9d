// Megatron's VocabParallelEmbedding and vocab_parallel_cross_entropy.
#include "tessera/parallel/vocab_parallel.h"

#include "dim_collectives.h"

#include <any>
#include <limits>

#include "tessera/autograd/function.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/sequence_parallel.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/parallel/tensor_parallel_layout.h"

namespace tessera::parallel {

namespace {

// ids in [start, start + n), as a bool tensor.
Tensor in_range(const Tensor& ids, int64_t start, int64_t n) {
  const Tensor lo = ge(ids, scalar_tensor(static_cast<double>(start), DType::Int64, ids.device()));
  const Tensor hi =
      lt(ids, scalar_tensor(static_cast<double>(start + n), DType::Int64, ids.device()));
  return where(lo, hi, lo);  // lo && hi
}

// ids - start where `inside`, else 0 (a valid local row whose result is then masked).
Tensor local_ids(const Tensor& ids, const Tensor& inside, int64_t start) {
  const Tensor shifted =
      ids - scalar_tensor(static_cast<double>(start), DType::Int64, ids.device());
  return where(inside, shifted, zeros_like(ids));
}

}  // namespace

VocabParallelEmbedding::VocabParallelEmbedding(nn::Module* parent, const std::string& name,
                                               int64_t num_embeddings, int64_t dim,
                                               std::shared_ptr<ProcessGroup> group,
                                               bool sequence_parallel)
    : UnaryModule(parent, name),
      num_embeddings(num_embeddings),
      dim(dim),
      sequence_parallel(sequence_parallel),
      group_(group && group->size() > 1 ? std::move(group) : nullptr) {
  TS_CHECK(num_embeddings >= 1 && dim >= 1, "VocabParallelEmbedding '", name, "': ", num_embeddings,
           " x ", dim, " is not an embedding");
  const int64_t n = group_ ? group_->size() : 1;
  padded_embeddings = (num_embeddings + n - 1) / n * n;
  vocab_per_rank = padded_embeddings / n;
  vocab_start = group_ ? group_->rank() * vocab_per_rank : 0;
  if (group_) {
    register_parameter("weight", &weight, zeros({vocab_per_rank, dim}));
    return;
  }
  this->sequence_parallel = false;  // plain: nn::Embedding
  register_parameter("weight", &weight, Tensor::empty({num_embeddings, dim}));
  nn::reset_embedding_parameters(weight);
}

void VocabParallelEmbedding::load_from_full(const Tensor& w) {
  TS_CHECK(w.shape() == Shape({num_embeddings, dim}), "VocabParallelEmbedding '", name(),
           "': the whole weight must be [", num_embeddings, ", ", dim, "], got ", w.describe());
  NoGradGuard no_grad;
  if (!group_) {
    weight.copy_(w);
    return;
  }
  weight.copy_(shard_of_whole(w, {0, 1, num_embeddings}, group_->rank(), group_->size()));
}

TensorParallelLayout VocabParallelEmbedding::tensor_parallel_splits() const {
  if (!group_) return {};
  return {{"weight", {0, 1, num_embeddings}}};
}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  nn::ModuleScope scope(*this);
  if (!group_) return embedding(weight, ids);
  const Tensor inside = in_range(ids, vocab_start, vocab_per_rank);
  const Tensor rows = embedding(weight, local_ids(ids, inside, vocab_start));
  const Tensor outside = eq(inside, zeros_like(inside)).unsqueeze(-1);
  const Tensor mine = masked_fill(rows, outside, 0.0);
  return sequence_parallel ? reduce_scatter_to_sequence_parallel_region(mine, *group_)
                           : reduce_from_tensor_parallel_region(mine, *group_);
}

Tensor vocab_parallel_logits(const Tensor& hidden, const VocabParallelEmbedding& embedding,
                             bool sequence_parallel) {
  ProcessGroup* group = embedding.group();
  if (!group) return linear(hidden, embedding.weight);  // a plain tied head
  const Tensor logits =
      sequence_parallel ? sequence_parallel_linear(hidden, embedding.weight, Tensor(), *group)
                        : linear(copy_to_tensor_parallel_region(hidden, *group), embedding.weight);
  const int64_t start = embedding.vocab_start, n = embedding.vocab_per_rank;
  if (start + n <= embedding.num_embeddings) return logits;
  // This rank holds padding columns: -inf is added to them. (An addition saves nothing for
  // backward, where masked_fill kept its mask: the padded rank then held more activation
  // memory than the others and than estimate-memory's model of them.)
  Tensor bias;
  {
    NoGradGuard constant;
    const Tensor columns = arange(static_cast<double>(start), static_cast<double>(start + n), 1,
                                  DType::Int64, logits.device());
    const Tensor pad = ge(columns, scalar_tensor(static_cast<double>(embedding.num_embeddings),
                                                 DType::Int64, logits.device()));
    bias = masked_fill(zeros({n}, logits.dtype(), logits.device()), pad,
                       -std::numeric_limits<double>::infinity());
  }
  return logits + bias;
}

Tensor whole_vocab_logits(const Tensor& local_logits, const VocabParallelEmbedding& embedding) {
  ProcessGroup* group = embedding.group();
  if (!group) return local_logits;
  const Tensor all = gather_from_tensor_parallel_region(local_logits, *group);
  return all.narrow(all.dim() - 1, 0, embedding.num_embeddings);
}

Tensor vocab_parallel_cross_entropy(const Tensor& local_logits, const Tensor& targets,
                                    ProcessGroup& group, int64_t ignore_index) {
  const int64_t v = local_logits.shape().back();
  TS_CHECK(targets.numel() * v == local_logits.numel(), "vocab_parallel_cross_entropy: logits ",
           local_logits.describe(), " and targets ", targets.describe(), " do not match");
  const int64_t start = group.rank() * v;
  using autograd::FunctionContext;
  return autograd::CustomFunction::apply(
      {local_logits},
      [&group, targets, v, start, ignore_index](FunctionContext& ctx,
                                                const std::vector<Tensor>& in) {
        NoGradGuard no_grad;
        const int64_t rows = targets.numel();
        const Tensor x = in[0].reshape({rows, v});
        const Tensor shifted = x - all_reduced(amax(x, {1}, true), group, ReduceOp::Max);
        const Tensor e = exp(shifted);
        const Tensor sum_exp = all_reduced(sum(e, {1}, true), group, ReduceOp::Sum);
        const Tensor t = targets.reshape({rows});
        const Tensor valid =
            ne(t, scalar_tensor(static_cast<double>(ignore_index), DType::Int64, t.device()));
        const Tensor mine = where(valid, in_range(t, start, v), valid);
        const Tensor columns = arange(0, static_cast<double>(v), 1, DType::Int64, t.device());
        // Each row's target column on this rank, -1 where the target lives elsewhere (or is
        // ignored): kept for backward instead of a [rows, v] one-hot.
        const Tensor target_column =
            where(mine, local_ids(t, mine, start), full(t.shape(), -1.0, DType::Int64, t.device()))
                .unsqueeze(1);
        const Tensor hit = eq(columns.unsqueeze(0), target_column);
        // (where, not a product: a masked column's -inf times 0 would be NaN)
        const Tensor target_logit = all_reduced(
            sum(where(hit, shifted, zeros_like(shifted)), {1}, true), group, ReduceOp::Sum);
        const Tensor weight = valid.to(x.dtype()).unsqueeze(1);
        const double count = sum(valid.to(DType::Float64)).item();
        const Tensor token_loss = (log(sum_exp) - target_logit) * weight;
        ctx.save_for_backward({e / sum_exp, target_column, weight});
        ctx.data["count"] = count;
        const double total = sum(token_loss.to(DType::Float64)).item();
        const double loss = count > 0 ? total / count : std::numeric_limits<double>::quiet_NaN();
        return std::vector<Tensor>{scalar_tensor(loss, x.dtype(), x.device())};
      },
      [shape = local_logits.shape()](FunctionContext& ctx, const std::vector<Tensor>& g) {
        NoGradGuard no_grad;
        const auto& s = ctx.saved();
        const double count = std::any_cast<double>(ctx.data.at("count"));
        if (count == 0) return std::vector<Tensor>{zeros_like(s[0]).reshape(shape)};
        const int64_t v = s[0].size(1);
        const Tensor columns = arange(0, static_cast<double>(v), 1, DType::Int64, s[0].device());
        const Tensor onehot = eq(columns.unsqueeze(0), s[1]).to(s[0].dtype());
        const Tensor grad = (s[0] - onehot) * s[2] * (g[0] / count);
        return std::vector<Tensor>{grad.reshape(shape)};
      },
      "VocabParallelCrossEntropy")[0];
}

}  // namespace tessera::parallel
