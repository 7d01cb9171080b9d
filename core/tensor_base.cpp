// TensorBase: allocation, geometry and element access (views: tensor_views.cpp).
#include "tessera/tensor_base.h"

#include <cstring>
#include <sstream>

#include "tessera/dispatch.h"

namespace tessera {

namespace {
// A contiguous tensor over fresh storage from make_storage(nbytes).
template <class MakeStorage>
TensorBase fresh_contiguous(const char* op, const Shape& shape, DType dtype,
                            MakeStorage make_storage) {
  // The byte count is checked, not wrapped: a shape read from a file may be anything.
  int64_t bytes = static_cast<int64_t>(itemsize(dtype));
  for (int64_t s : shape) {
    TS_CHECK(s >= 0, op, ": negative dimension in shape ", shape_str(shape));
    TS_CHECK(!__builtin_mul_overflow(bytes, s, &bytes), op, ": a ", dtype_name(dtype),
             " tensor of shape ", shape_str(shape), " would need more than 2^63 bytes");
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = make_storage(static_cast<size_t>(bytes));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return TensorBase(std::move(impl));
}
}  // namespace

TensorBase TensorBase::empty(const Shape& shape, DType dtype, Device device) {
  return fresh_contiguous("empty", shape, dtype,
                          [&](size_t n) { return std::make_shared<Storage>(n, device); });
}

TensorBase TensorBase::empty_pinned(const Shape& shape, DType dtype) {
  return fresh_contiguous("empty_pinned", shape, dtype,
                          [](size_t n) { return Storage::pinned(n); });
}

TensorBase TensorBase::make_view(const TensorBase& base, Shape shape, Shape strides,
                                 int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return TensorBase(std::move(impl));
}

int64_t TensorBase::size(int64_t d) const {
  return shape()[wrap_dim(d, dim(), "size")];
}

bool TensorBase::is_contiguous() const {
  int64_t expected = 1;
  const Shape& sh = shape();
  const Shape& st = strides();
  for (size_t i = sh.size(); i-- > 0;) {
    if (sh[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= sh[i];
  }
  return true;
}

void* TensorBase::data_ptr() const {
  Storage& st = *storage();
  if (!st.resident()) {
    TS_CHECK(st.fetcher(), "tensor ", describe(), " has released storage");
    // A released ZeRO-3 parameter read outside an op (item(), to_vector(), ...): gather it.
    st.fetcher()->fetch(st);
  }
  return static_cast<char*>(st.data()) + offset() * static_cast<int64_t>(itemsize(dtype()));
}

namespace {
double read_element(const void* p, DType t) {
  switch (t) {
    case DType::Bool:
      return *static_cast<const bool*>(p) ? 1.0 : 0.0;
    case DType::Int32:
      return *static_cast<const int32_t*>(p);
    case DType::Int64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::Float16:
      return half_bits_to_float(*static_cast<const uint16_t*>(p));
    case DType::BFloat16:
      return bf16_bits_to_float(*static_cast<const uint16_t*>(p));
    case DType::Float32:
      return *static_cast<const float*>(p);
    case DType::Float64:
      return *static_cast<const double*>(p);
  }
  return 0.0;
}

// The values in a contiguous host tensor: *this when it is one, else a copy made by the copy
// kernel itself (reading values records no graph, so core needs no op).
TensorBase host_contiguous(const TensorBase& t) {
  if (t.device().is_cpu() && t.is_contiguous()) return t;
  const TensorBase ins[1] = {t};
  TensorBase outs[1] = {TensorBase::empty(t.shape(), t.dtype(), Device::cpu())};
  run_kernel(Kernel::copy, t.device().is_cuda() ? t.device() : Device::cpu(), t.dtype(), ins, outs);
  return outs[0];
}
}  // namespace

std::vector<double> TensorBase::to_vector() const {
  const TensorBase c = host_contiguous(*this);
  const char* base = static_cast<const char*>(c.data_ptr());
  const size_t item = itemsize(c.dtype());
  std::vector<double> out(static_cast<size_t>(c.numel()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = read_element(base + i * item, c.dtype());
  return out;
}

std::vector<int64_t> TensorBase::to_int_vector() const {
  if (dtype() == DType::Int64) {
    const TensorBase c = host_contiguous(*this);
    const int64_t* p = c.data<int64_t>();
    return std::vector<int64_t>(p, p + c.numel());
  }
  std::vector<int64_t> out;
  for (double v : to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

double TensorBase::item() const {
  TS_CHECK(numel() == 1, "item: expected a tensor with one element, got ", describe());
  return to_vector()[0];
}

std::string TensorBase::describe() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " on " + device().str();
}

std::string TensorBase::str() const {
  std::ostringstream os;
  os << "tensor(" << describe();
  if (defined() && numel() <= 64) {
    os << ", [";
    const auto v = to_vector();
    for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
    os << "]";
  }
  os << ")";
  return os.str();
}

}  // namespace tessera
