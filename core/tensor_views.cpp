// TensorBase's views and copies: the geometry of each view and the copy kernel call, with no
// autograd. Tensor's methods of the same names (autograd/ops_shape.cpp) call these and record.
#include <algorithm>
#include <numeric>
#include <tuple>

#include "tessera/dispatch.h"
#include "tessera/tensor_base.h"

namespace tessera {

std::optional<Shape> view_strides(const TensorBase& t, const Shape& shape) {
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

TensorBase TensorBase::view(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), "view");
  auto st = view_strides(*this, shape);
  TS_CHECK(st.has_value(), "view: cannot view ", describe(), " (strides ", shape_str(strides()),
           ") as ", shape_str(shape), " without a copy; use reshape()");
  return make_view(*this, shape, *st, offset());
}

TensorBase TensorBase::reshape(const Shape& requested) const {
  const Shape shape = infer_shape(requested, numel(), "reshape");
  if (view_strides(*this, shape).has_value()) return view(shape);
  return contiguous().view(shape);
}

TensorBase TensorBase::permute(const std::vector<int64_t>& dims) const {
  TS_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: got ", dims.size(),
           " dims for a tensor with ", dim(), " dimensions");
  Shape shape(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    TS_CHECK(!seen[d], "permute: dimension ", d, " repeated");
    seen[d] = true;
    shape[i] = this->shape()[d];
    st[i] = strides()[d];
  }
  return make_view(*this, shape, st, offset());
}

std::vector<int64_t> transpose_permutation(int64_t dim, int64_t d0, int64_t d1) {
  std::vector<int64_t> p(static_cast<size_t>(dim));
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[wrap_dim(d0, dim, "transpose")], p[wrap_dim(d1, dim, "transpose")]);
  return p;
}

TensorBase TensorBase::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  return permute(transpose_permutation(dim(), d0, d1));
}

std::pair<int64_t, int64_t> slice_bounds(int64_t n, int64_t start, int64_t end) {
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  return {start, std::clamp<int64_t>(end, start, n)};
}

TensorBase TensorBase::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  TS_CHECK(step > 0, "slice: step must be positive, got ", step);
  std::tie(start, end) = slice_bounds(shape()[d], start, end);
  Shape shape = this->shape(), st = strides();
  shape[d] = (end - start + step - 1) / step;
  st[d] *= step;
  return make_view(*this, shape, st, offset() + start * strides()[d]);
}

int64_t narrow_start(const TensorBase& t, int64_t d, int64_t start, int64_t length) {
  d = wrap_dim(d, t.dim(), "narrow");
  const int64_t n = t.shape()[d];
  if (start < 0) start += n;
  TS_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ",
           start + length, ") is out of bounds for dimension ", d, " of size ", n, " in ",
           t.describe());
  return start;
}

TensorBase TensorBase::narrow(int64_t d, int64_t start, int64_t length) const {
  start = narrow_start(*this, d, start, length);
  return slice(d, start, start + length);
}

TensorBase TensorBase::expand(const Shape& shape) const {
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
  return make_view(*this, out, st, offset());
}

TensorBase TensorBase::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Shape shape = this->shape(), st = strides();
  shape.erase(shape.begin() + d);
  st.erase(st.begin() + d);
  return make_view(*this, shape, st, offset());
}

TensorBase TensorBase::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape shape = this->shape(), st = strides();
  const int64_t stride = d < dim() ? strides()[d] * this->shape()[d] : 1;
  shape.insert(shape.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return make_view(*this, shape, st, offset());
}

TensorBase copy_to(const TensorBase& t, DType dtype, Device device) {
  TensorBase out = TensorBase::empty(t.shape(), dtype, device);
  const TensorBase ins[1] = {t};
  TensorBase outs[1] = {out};
  const Device run_on = t.device().is_cuda() ? t.device() : device;
  run_kernel(Kernel::copy, run_on, dtype, ins, outs);
  return out;
}

TensorBase TensorBase::contiguous() const {
  return is_contiguous() ? *this : clone();
}

TensorBase TensorBase::clone() const {
  return copy_to(*this, dtype(), device());
}

TensorBase TensorBase::to(DType dtype) const {
  return dtype == this->dtype() ? *this : copy_to(*this, dtype, device());
}

TensorBase TensorBase::to(Device device) const {
  return device == this->device() ? *this : copy_to(*this, dtype(), device);
}

}  // namespace tessera
