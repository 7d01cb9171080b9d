#include "dim_collectives.h"

#include "tessera/autograd/function.h"
#include "tessera/ops.h"

namespace tessera::parallel {

namespace {

int64_t positive_dim(const Tensor& x, int64_t dim) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TS_CHECK(d >= 0 && d < x.dim(), "dimension ", dim, " of ", x.describe(), " does not exist");
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

// `dim` of x (made non-negative), checked to divide among the group's ranks.
int64_t divisible_dim(const Tensor& x, int64_t dim, const ProcessGroup& group, const char* what) {
  const int64_t d = positive_dim(x, dim);
  TS_CHECK(x.shape()[static_cast<size_t>(d)] % group.size() == 0, what, ": dimension ", d, " of ",
           x.describe(), " does not divide among ", group.size(), " ranks");
  return d;
}

}  // namespace

Tensor all_reduced(const Tensor& x, ProcessGroup& group, ReduceOp op) {
  Tensor y = x.contiguous().clone();
  group.all_reduce(y, op);
  return y;
}

Tensor dim_chunk(const Tensor& x, int64_t dim, ProcessGroup& group, const char* what) {
  const int64_t d = divisible_dim(x, dim, group, what);
  const int64_t len = x.shape()[static_cast<size_t>(d)] / group.size();
  return x.narrow(d, group.rank() * len, len).contiguous();
}

Tensor dim_gather(const Tensor& x, int64_t dim, ProcessGroup& group) {
  const int64_t d = positive_dim(x, dim);
  const Tensor front = dim_first(x, d);
  Shape shape = front.shape();
  shape[0] *= group.size();
  Tensor all = Tensor::empty(shape, x.dtype(), x.device());
  group.all_gather(all.view({all.numel()}), front.view({front.numel()}));
  return dim_back(all, d);
}

Tensor dim_reduce_scatter(const Tensor& x, int64_t dim, ProcessGroup& group, const char* what) {
  const int64_t d = divisible_dim(x, dim, group, what);
  const Tensor front = dim_first(x, d);
  Shape shape = front.shape();
  shape[0] /= group.size();
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  group.reduce_scatter(out.view({out.numel()}), front.view({front.numel()}));
  return dim_back(out, d);
}

Tensor region_function(const Tensor& x, const char* name, RegionFn forward, RegionFn backward) {
  using autograd::FunctionContext;
  return autograd::CustomFunction::apply(
      {x},
      [forward](FunctionContext&, const std::vector<Tensor>& in) {
        return std::vector<Tensor>{forward(in[0])};
      },
      [backward](FunctionContext&, const std::vector<Tensor>& g) {
        return std::vector<Tensor>{backward(g[0])};
      },
      name)[0];
}

}  // namespace tessera::parallel
