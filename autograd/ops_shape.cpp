// Views (no copy), copies, casts and device moves, each with its gradient.
#include <numeric>

#include "autograd/op_util.h"

namespace tessera {

using autograd::record;
using detail::sum_to_shape;

namespace {

Tensor record_view(const char* name, const Tensor& x, Tensor out, autograd::BackwardFn fn) {
  std::vector<Tensor> outs{out};
  record(name, {x}, outs, std::move(fn));
  return outs[0];
}

// Strides for viewing `t` as `shape` without copying, or empty when impossible.
std::optional<Shape> view_strides(const Tensor& t, const Shape& shape) {
  // An empty tensor has no elements to misplace: any shape of 0 elements views it.
  if (t.is_contiguous() || t.numel() == 0) return contiguous_strides(shape);
  // Split the old shape into chunks of mutually contiguous dims, then map new dims onto them.
  const Shape& os = t.shape();
  const Shape& ost = t.strides();
  Shape st(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = ost.empty() ? 1 : ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        st[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return st;
}

Shape infer_shape(const Shape& requested, int64_t numel, const char* op) {
  Shape shape = requested;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TS_CHECK(infer < 0, op, ": only one dimension can be -1 in ", shape_str(requested));
      infer = static_cast<int64_t>(i);
    } else {
      TS_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in ", shape_str(requested));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TS_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(requested),
             " is invalid for ", numel, " elements");
    shape[infer] = numel / known;
  }
  TS_CHECK(numel_of(shape) == numel, op, ": shape ", shape_str(requested), " is invalid for ",
           numel, " elements");
  return shape;
}

}  // namespace

Tensor Tensor::view(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), "view");
  auto st = view_strides(*this, shape);
  TS_CHECK(st.has_value(), "view: cannot view ", describe(), " (strides ", shape_str(strides()),
           ") as ", shape_str(shape), " without a copy; use reshape()");
  const Shape in_shape = this->shape();
  return record_view("ViewBackward", *this, make_view(*this, shape, *st, offset()),
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
  TS_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: got ", dims.size(),
           " dims for a tensor with ", dim(), " dimensions");
  Shape shape(dims.size()), st(dims.size());
  std::vector<int64_t> inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    TS_CHECK(inverse[d] < 0, "permute: dimension ", d, " repeated");
    inverse[d] = static_cast<int64_t>(i);
    shape[i] = this->shape()[d];
    st[i] = strides()[d];
  }
  return record_view("PermuteBackward", *this, make_view(*this, shape, st, offset()),
                     [inverse](const std::vector<Tensor>& g) {
                       return std::vector<Tensor>{g[0].permute(inverse)};
                     });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> p(static_cast<size_t>(dim()));
  std::iota(p.begin(), p.end(), 0);
  if (dim() == 0) return *this;
  std::swap(p[wrap_dim(d0, dim(), "transpose")], p[wrap_dim(d1, dim(), "transpose")]);
  return permute(p);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  TS_CHECK(step > 0, "slice: step must be positive, got ", step);
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = this->shape(), st = strides();
  shape[d] = (end - start + step - 1) / step;
  st[d] *= step;
  const Shape in_shape = this->shape();
  return record_view("SliceBackward", *this,
                     make_view(*this, shape, st, offset() + start * strides()[d]),
                     [in_shape, d, start, end, step](const std::vector<Tensor>& g) {
                       Tensor gi = zeros(in_shape, g[0].dtype(), g[0].device());
                       gi.slice(d, start, end, step).copy_(g[0]);
                       return std::vector<Tensor>{gi};
                     });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  TS_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ",
           start + length, ") is out of bounds for dimension ", d, " of size ", n, " in ",
           describe());
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
  TS_CHECK(shape.size() >= this->shape().size(), "expand: cannot expand ", describe(), " to ",
           shape_str(shape), " (fewer dimensions)");
  const size_t lead = shape.size() - this->shape().size();
  Shape out = shape, st(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      TS_CHECK(shape[i] >= 0, "expand: invalid size -1 for new leading dim in ", shape_str(shape));
      continue;
    }
    const int64_t have = this->shape()[i - lead];
    if (shape[i] == -1 || shape[i] == have) {
      out[i] = have;
      st[i] = strides()[i - lead];
    } else {
      TS_CHECK(have == 1, "expand: cannot expand ", describe(), " to ", shape_str(shape),
               " (dimension ", i, " has size ", have, ", expected 1 or ", shape[i], ")");
    }
  }
  if (out == this->shape()) return *this;
  const Shape in_shape = this->shape();
  return record_view("ExpandBackward", *this, make_view(*this, out, st, offset()),
                     [in_shape](const std::vector<Tensor>& g) {
                       return std::vector<Tensor>{sum_to_shape(g[0], in_shape)};
                     });
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape shape = this->shape(), st = strides();
  shape.erase(shape.begin() + d);
  st.erase(st.begin() + d);
  const Shape in_shape = this->shape();
  return record_view("SqueezeBackward", *this, make_view(*this, shape, st, offset()),
                     [in_shape](const std::vector<Tensor>& g) {
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
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape shape = this->shape(), st = strides();
  const int64_t stride = d < dim() ? strides()[d] * this->shape()[d] : 1;
  shape.insert(shape.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  const Shape in_shape = this->shape();
  return record_view("UnsqueezeBackward", *this, make_view(*this, shape, st, offset()),
                     [in_shape](const std::vector<Tensor>& g) {
                       return std::vector<Tensor>{g[0].reshape(in_shape)};
                     });
}

namespace {
// Copy into a new contiguous tensor of `dtype` on `device` (the copy kernel also casts).
Tensor copy_to(const Tensor& x, DType dtype, Device device) {
  Tensor out = Tensor::empty(x.shape(), dtype, device);
  const Tensor ins[1] = {x};
  Tensor outs[1] = {out};
  const Device run_on = x.device().is_cuda() ? x.device() : device;
  run_kernel(Kernel::copy, run_on, dtype, ins, outs);
  return out;
}
}  // namespace

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  std::vector<Tensor> outs{copy_to(*this, dtype(), device())};
  record("CloneBackward", {*this}, outs, [](const std::vector<Tensor>& g) { return g; });
  return outs[0];
}

Tensor Tensor::pin_memory() const {
  TS_CHECK(device().is_cpu(), "pin_memory: ", describe(),
           " is not in host memory; only host tensors can be pinned");
  if (is_pinned()) return *this;
  Tensor out = Tensor::empty_pinned(shape(), dtype());
  const Tensor ins[1] = {*this};
  Tensor outs1[1] = {out};
  run_kernel(Kernel::copy, Device::cpu(), dtype(), ins, outs1);
  std::vector<Tensor> outs{out};
  record("PinMemoryBackward", {*this}, outs, [](const std::vector<Tensor>& g) { return g; });
  return out;
}

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  std::vector<Tensor> outs{copy_to(x, dtype, x.device())};
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
  std::vector<Tensor> outs{copy_to(x, x.dtype(), device)};
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
