// Megatron-SP's communication functions along the sequence dimension, as autograd functions.
#include "tessera/parallel/sequence_parallel.h"

#include "tessera/autograd/function.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::parallel {

namespace {

using autograd::CustomFunction;
using autograd::FunctionContext;

int64_t positive_dim(const Tensor& x, int64_t dim) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TS_CHECK(d >= 0 && d < x.dim(), "sequence parallel: dim ", dim, " of ", x.describe());
  return d;
}

// x with `dim` moved to the front, contiguous: the ranks' chunks are then contiguous blocks.
Tensor dim_first(const Tensor& x, int64_t dim) {
  std::vector<int64_t> order{dim};
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != dim) order.push_back(i);
  return x.permute(order).contiguous();
}

// The inverse of dim_first for a tensor whose first dimension is `dim`'s.
Tensor dim_back(const Tensor& y, int64_t dim) {
  std::vector<int64_t> order;
  for (int64_t i = 1; i <= dim; ++i) order.push_back(i);
  order.insert(order.begin() + dim, 0);
  for (int64_t i = dim + 1; i < y.dim(); ++i) order.push_back(i);
  return y.permute(order).contiguous();
}

Tensor chunk(const Tensor& x, int64_t dim, ProcessGroup& group) {
  const int64_t d = positive_dim(x, dim), len = x.shape()[static_cast<size_t>(d)], n = group.size();
  TS_CHECK(len % n == 0, "sequence parallel: the sequence (dim ", d, " of ", x.describe(),
           ") does not divide among ", n, " ranks");
  return x.narrow(d, group.rank() * (len / n), len / n).contiguous();
}

Tensor gather(const Tensor& x, int64_t dim, ProcessGroup& group) {
  const int64_t d = positive_dim(x, dim), n = group.size();
  const Tensor front = dim_first(x, d);
  Shape shape = front.shape();
  shape[0] *= n;
  Tensor all = Tensor::empty(shape, x.dtype(), x.device());
  group.all_gather(all.view({all.numel()}), front.view({front.numel()}));
  return dim_back(all, d);
}

Tensor reduce_scatter(const Tensor& x, int64_t dim, ProcessGroup& group) {
  const int64_t d = positive_dim(x, dim), len = x.shape()[static_cast<size_t>(d)], n = group.size();
  TS_CHECK(len % n == 0, "sequence parallel: the sequence (dim ", d, " of ", x.describe(),
           ") does not divide among ", n, " ranks");
  const Tensor front = dim_first(x, d);
  Shape shape = front.shape();
  shape[0] /= n;
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  group.reduce_scatter(out.view({out.numel()}), front.view({front.numel()}));
  return dim_back(out, d);
}

using Fn = std::function<Tensor(const Tensor&)>;
Tensor apply(const Tensor& x, const char* name, Fn forward, Fn backward) {
  return CustomFunction::apply(
      {x},
      [forward](FunctionContext&, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{forward(in[0])};
      },
      [backward](FunctionContext&, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{backward(g[0])};
      },
      name)[0];
}

}  // namespace

Tensor scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim) {
  return apply(
      x, "ScatterToSequenceParallelRegion",
      [&group, dim](const Tensor& t) { return chunk(t, dim, group); },
      [&group, dim](const Tensor& g) { return gather(g, dim, group); });
}

Tensor gather_from_sequence_parallel_region(const Tensor& x, ProcessGroup& group, int64_t dim) {
  return apply(
      x, "GatherFromSequenceParallelRegion",
      [&group, dim](const Tensor& t) { return gather(t, dim, group); },
      [&group, dim](const Tensor& g) { return reduce_scatter(g, dim, group); });
}

Tensor reduce_scatter_to_sequence_parallel_region(const Tensor& x, ProcessGroup& group,
                                                  int64_t dim) {
  return apply(
      x, "ReduceScatterToSequenceParallelRegion",
      [&group, dim](const Tensor& t) { return reduce_scatter(t, dim, group); },
      [&group, dim](const Tensor& g) { return gather(g, dim, group); });
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
