// Reductions over any set of dims. The input is permuted so reduced dims come last and
// presented to the kernel as a contiguous [kept, reduced] matrix.
#include <algorithm>
#include <numeric>

#include "op_util.h"

namespace tessera {

using autograd::record;
using detail::untracked;

namespace {

struct ReducePlan {
  std::vector<int64_t> dims;  // sorted, unique, wrapped
  Shape out_shape;            // without keepdim
  Shape keep_shape;           // with reduced dims as 1
  int64_t reduced = 1;
};

ReducePlan plan(const char* op, const Tensor& x, std::vector<int64_t> dims) {
  ReducePlan p;
  if (dims.empty()) {
    dims.resize(static_cast<size_t>(x.dim()));
    std::iota(dims.begin(), dims.end(), 0);
  }
  for (int64_t& d : dims) d = wrap_dim(d, x.dim(), op);
  std::sort(dims.begin(), dims.end());
  TS_CHECK(std::adjacent_find(dims.begin(), dims.end()) == dims.end(), op,
           ": repeated dim in reduction");
  p.dims = dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const bool red = std::binary_search(dims.begin(), dims.end(), d);
    p.keep_shape.push_back(red ? 1 : x.shape()[d]);
    if (red)
      p.reduced *= x.shape()[d];
    else
      p.out_shape.push_back(x.shape()[d]);
  }
  return p;
}

// x permuted (kept dims, then reduced dims) as a contiguous 2-D [kept, reduced] tensor.
Tensor as_rows(const Tensor& x, const ReducePlan& p) {
  NoGradGuard no_grad;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!std::binary_search(p.dims.begin(), p.dims.end(), d)) perm.push_back(d);
  perm.insert(perm.end(), p.dims.begin(), p.dims.end());
  const int64_t kept = numel_of(p.out_shape);
  return x.permute(perm).contiguous().view({kept, p.reduced});
}

Tensor reduce_kernel(Kernel k, const Tensor& x, const ReducePlan& p, DType out_dtype,
                     const KernelAttrs& attrs = {}) {
  const Tensor rows = as_rows(untracked(x), p);
  Tensor out = detail::run1(k, {rows}, {rows.shape()[0]}, out_dtype, x.dtype(), attrs);
  return out.view(p.out_shape);
}

Tensor finish(Tensor out, const ReducePlan& p, bool keepdim) {
  return keepdim ? out.view(p.keep_shape) : out;
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  const ReducePlan p = plan("sum", x, std::move(dims));
  const DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  std::vector<Tensor> outs{finish(reduce_kernel(Kernel::sum, x, p, out_dtype), p, keepdim)};
  record("SumBackward", {x}, outs, [p, shape = x.shape()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(p.keep_shape).expand(shape)};
  });
  return outs[0];
}

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  detail::check_floating("mean", x);
  const ReducePlan p = plan("mean", x, dims);
  return sum(x, dims, keepdim) / static_cast<double>(std::max<int64_t>(p.reduced, 1));
}

namespace {
Tensor extreme(Kernel k, const char* op, const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  const ReducePlan p = plan(op, x, std::move(dims));
  TS_CHECK(x.numel() > 0 || p.reduced > 0, op, ": cannot reduce an empty tensor ", x.describe());
  std::vector<Tensor> outs{finish(reduce_kernel(k, x, p, x.dtype()), p, keepdim)};
  // Gradient shared evenly among tied extremes (torch.amax semantics).
  record(std::string(op) + "Backward", {x}, outs,
         [p, ux = untracked(x), y = untracked(outs[0])](const std::vector<Tensor>& g) {
           const Tensor hit = eq(ux, y.reshape(p.keep_shape)).to(ux.dtype());
           const Tensor count = sum(hit, p.dims, true);
           return std::vector<Tensor>{mul(div(g[0].reshape(p.keep_shape), count), hit)};
         },
         {x});
  return outs[0];
}
}  // namespace

Tensor amax(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return extreme(Kernel::max, "amax", x, std::move(dims), keepdim);
}
Tensor amin(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  return extreme(Kernel::min, "amin", x, std::move(dims), keepdim);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  const ReducePlan p = plan("argmax", x, {dim});
  return finish(reduce_kernel(Kernel::argmax, x, p, DType::Int64), p, keepdim);
}

Tensor var(const Tensor& x, std::vector<int64_t> dims, int64_t correction, bool keepdim) {
  detail::check_floating("var", x);
  const ReducePlan p = plan("var", x, std::move(dims));
  KernelAttrs a;
  a.index = correction;
  std::vector<Tensor> outs{finish(reduce_kernel(Kernel::var, x, p, x.dtype(), a), p, keepdim)};
  record("VarBackward", {x}, outs,
         [p, correction, ux = untracked(x)](const std::vector<Tensor>& g) {
           // d var / dx = 2 (x - mean) / (N - correction)
           const Tensor centered = sub(ux, mean(ux, p.dims, true));
           const double scale = 2.0 / static_cast<double>(p.reduced - correction);
           return std::vector<Tensor>{mul(g[0].reshape(p.keep_shape), centered) * scale};
         },
         {x});
  return outs[0];
}

Tensor norm(const Tensor& x, std::vector<int64_t> dims, bool keepdim) {
  detail::check_floating("norm", x);
  const ReducePlan p = plan("norm", x, std::move(dims));
  std::vector<Tensor> outs{finish(reduce_kernel(Kernel::norm, x, p, x.dtype()), p, keepdim)};
  record("NormBackward", {x}, outs,
         [p, ux = untracked(x), y = untracked(outs[0])](const std::vector<Tensor>& g) {
           // x / ||x||, taken as 0 where the norm is 0 (the subgradient torch uses)
           const Tensor n = y.reshape(p.keep_shape);
           const Tensor safe = where(eq(n, zeros_like(n)), ones_like(n), n);
           return std::vector<Tensor>{mul(g[0].reshape(p.keep_shape), div(ux, safe))};
         },
         {x});
  return outs[0];
}

}  // namespace tessera

namespace tessera {

Tensor sum_squares(const std::vector<Tensor>& tensors) {
  TS_CHECK(!tensors.empty(), "sum_squares: expected at least one tensor");
  detail::check_same_device("sum_squares", tensors);
  const DType dt = tensors[0].dtype();
  std::vector<TensorBase> ins;
  for (const Tensor& t : tensors) {
    detail::check_floating("sum_squares", t);
    TS_CHECK(t.dtype() == dt, "sum_squares: tensors must share one dtype, got ",
             tensors[0].describe(), " and ", t.describe());
    ins.push_back(untracked(t).contiguous());
  }
  Tensor out =
      Tensor::empty({static_cast<int64_t>(ins.size())}, DType::Float64, tensors[0].device());
  TensorBase outs[1] = {out};
  run_kernel(Kernel::sum_squares, out.device(), dt, ins, outs);
  return out;
}

}  // namespace tessera
