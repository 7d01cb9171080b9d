// Tensor's views (no copy), copies, casts and device moves, each with its gradient.
#include <algorithm>
#include <tuple>

#include "op_util.h"

namespace tessera {

using autograd::record;
using detail::sum_to_shape;

namespace {

Tensor record_view(const char* name, const Tensor& x, const TensorBase& out,
                   autograd::BackwardFn fn) {
  std::vector<Tensor> outs{Tensor(out)};
  record(name, {x}, outs, std::move(fn));
  return outs[0];
}

}  // namespace

// Each view takes its geometry from TensorBase (core/tensor_views.cpp) and records how its
// gradient returns to the input's shape.
Tensor Tensor::view(const Shape& requested) const {
  const Shape in_shape = shape();
  return record_view("ViewBackward", *this, TensorBase::view(requested),
                     [in_shape](const std::vector<Tensor>& g) {
                       return std::vector<Tensor>{g[0].reshape(in_shape)};
                     });
}

Tensor Tensor::reshape(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), "reshape");
  if (view_strides(*this, shape).has_value()) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  const int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  TS_CHECK(s <= e, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape shape(this->shape().begin(), this->shape().begin() + s);
  int64_t n = 1;
  for (int64_t d = s; d <= e; ++d) n *= this->shape()[d];
  shape.push_back(n);
  shape.insert(shape.end(), this->shape().begin() + e + 1, this->shape().end());
  return reshape(shape);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  const TensorBase out = TensorBase::permute(dims);
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i)
    inverse[wrap_dim(dims[i], dim(), "permute")] = static_cast<int64_t>(i);
  return record_view("PermuteBackward", *this, out, [inverse](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].permute(inverse)};
  });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  return permute(transpose_permutation(dim(), d0, d1));
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  const TensorBase out = TensorBase::slice(d, start, end, step);
  // The gradient goes back into the same positions, with the bounds the view resolved.
  d = wrap_dim(d, dim(), "slice");
  std::tie(start, end) = slice_bounds(shape()[d], start, end);
  const Shape in_shape = shape();
  return record_view("SliceBackward", *this, out,
                     [in_shape, d, start, end, step](const std::vector<Tensor>& g) {
                       Tensor gi = zeros(in_shape, g[0].dtype(), g[0].device());
                       gi.slice(d, start, end, step).copy_(g[0]);
                       return std::vector<Tensor>{gi};
                     });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  start = narrow_start(*this, d, start, length);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  const int64_t n = shape()[d];
  TS_CHECK(index >= -n && index < n, "select: index ", index, " is out of bounds for dimension ", d,
           " of size ", n, " in ", describe());
  if (index < 0) index += n;
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& shape) const {
  const TensorBase out = TensorBase::expand(shape);
  if (out.same(*this)) return *this;
  const Shape in_shape = this->shape();
  return record_view("ExpandBackward", *this, out, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_to_shape(g[0], in_shape)};
  });
}

Tensor Tensor::squeeze(int64_t d) const {
  const TensorBase out = TensorBase::squeeze(d);
  if (out.same(*this)) return *this;
  const Shape in_shape = shape();
  return record_view("SqueezeBackward", *this, out, [in_shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].reshape(in_shape)};
  });
}

Tensor Tensor::squeeze() const {
  Shape shape;
  for (int64_t s : this->shape())
    if (s != 1) shape.push_back(s);
  return reshape(shape);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  const Shape in_shape = shape();
  return record_view("UnsqueezeBackward", *this, TensorBase::unsqueeze(d),
                     [in_shape](const std::vector<Tensor>& g) {
                       return std::vector<Tensor>{g[0].reshape(in_shape)};
                     });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  std::vector<Tensor> outs{Tensor(copy_to(*this, dtype(), device()))};
  record("CloneBackward", {*this}, outs, [](const std::vector<Tensor>& g) { return g; });
  return outs[0];
}

Tensor Tensor::pin_memory() const {
  TS_CHECK(device().is_cpu(), "pin_memory: ", describe(),
           " is not in host memory; only host tensors can be pinned");
  if (is_pinned()) return *this;
  Tensor out = Tensor::empty_pinned(shape(), dtype());
  const TensorBase ins[1] = {*this};
  TensorBase outs1[1] = {out};
  run_kernel(Kernel::copy, Device::cpu(), dtype(), ins, outs1);
  std::vector<Tensor> outs{out};
  record("PinMemoryBackward", {*this}, outs, [](const std::vector<Tensor>& g) { return g; });
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  std::vector<Tensor> outs{Tensor(copy_to(x, dtype, x.device()))};
  if (is_floating(dtype) && is_floating(x.dtype())) {
    const DType in = x.dtype();
    record("CastBackward", {x}, outs,
           [in](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].to(in)}; });
  }
  return outs[0];
}
Tensor Tensor::to(DType dtype) const {
  return cast(*this, dtype);
}

Tensor to_device(const Tensor& x, Device device) {
  if (x.device() == device) return x;
  std::vector<Tensor> outs{Tensor(copy_to(x, x.dtype(), device))};
  const Device in = x.device();
  record("ToDeviceBackward", {x}, outs,
         [in](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0].to(in)}; });
  return outs[0];
}
Tensor Tensor::to(Device device) const {
  return to_device(*this, device);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TS_CHECK(!tensors.empty(), "cat: expected at least one tensor");
  const Tensor& first = tensors[0];
  dim = wrap_dim(dim, first.dim(), "cat");
  detail::check_same_device("cat", tensors);
  Shape shape = first.shape();
  DType dtype = first.dtype();
  shape[dim] = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) {
    TS_CHECK(t.dim() == first.dim(), "cat: tensors must have the same number of dimensions, got ",
             first.describe(), " and ", t.describe());
    for (int64_t d = 0; d < t.dim(); ++d)
      TS_CHECK(d == dim || t.shape()[d] == first.shape()[d],
               "cat: sizes must match except in "
               "dimension ",
               dim, ", got ", first.describe(), " and ", t.describe());
    shape[dim] += t.shape()[dim];
    sizes.push_back(t.shape()[dim]);
    dtype = promote_types(dtype, t.dtype());
  }
  Tensor out = Tensor::empty(shape, dtype, first.device());
  {
    NoGradGuard no_grad;
    int64_t at = 0;
    for (const Tensor& t : tensors) {
      out.narrow(dim, at, t.shape()[dim]).copy_(t);
      at += t.shape()[dim];
    }
  }
  std::vector<Tensor> outs{out};
  record("CatBackward", tensors, outs,
         [sizes, dim](const std::vector<Tensor>& g) { return split(g[0], sizes, dim); });
  return outs[0];
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TS_CHECK(!tensors.empty(), "stack: expected at least one tensor");
  dim = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    TS_CHECK(t.shape() == tensors[0].shape(), "stack: all tensors must have one shape, got ",
             tensors[0].describe(), " and ", t.describe());
    parts.push_back(t.unsqueeze(dim));
  }
  return cat(parts, dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  TS_CHECK(total == x.shape()[dim], "split: sizes sum to ", total, " but dimension ", dim, " of ",
           x.describe(), " has size ", x.shape()[dim]);
  std::vector<Tensor> out;
  {
    NoGradGuard no_grad;
    int64_t at = 0;
    for (int64_t s : sizes) {
      out.push_back(x.detach().narrow(dim, at, s));
      at += s;
    }
  }
  // One node for all pieces: backward concatenates their gradients (zeros for pieces no
  // gradient reached) instead of scattering each into a zero tensor of the input's size.
  record("SplitBackward", {x}, out,
         [dim](const std::vector<Tensor>& g) { return std::vector<Tensor>{cat(g, dim)}; });
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  TS_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  const int64_t n = x.shape()[wrap_dim(dim, x.dim(), "split")];
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  TS_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t n = x.shape()[wrap_dim(dim, x.dim(), "chunk")];
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

}  // namespace tessera
