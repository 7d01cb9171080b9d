// TensorBase: a handle to a strided view over shared, reference-counted Storage, with what
// core itself defines: geometry, element access, and views and copies that record nothing.
// Kernels and backends work on TensorBase; Tensor (tensor.h, autograd layer) adds the graph.
// Copying a handle copies the handle, never the data (like torch.Tensor).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/error.h"
#include "tessera/shape.h"
#include "tessera/storage.h"

namespace tessera {

namespace autograd {
struct AutogradMeta;  // defined by the autograd layer; core only carries the pointer
}  // namespace autograd

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  std::shared_ptr<autograd::AutogradMeta> autograd;
};

class TensorBase {
 public:
  TensorBase() = default;
  explicit TensorBase(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised contiguous memory.
  static TensorBase empty(const Shape& shape, DType dtype = DType::Float32,
                          Device device = Device::cpu());
  // Uninitialised contiguous host memory that is page-locked (see Tensor::pin_memory).
  static TensorBase empty_pinned(const Shape& shape, DType dtype = DType::Float32);
  // A view sharing `base`'s storage with the given geometry and no autograd history.
  static TensorBase make_view(const TensorBase& base, Shape shape, Shape strides, int64_t offset);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  bool same(const TensorBase& other) const { return impl_ == other.impl_; }
  // No other handle to this tensor and no other tensor on its storage.
  bool is_unique() const { return impl_.use_count() == 1 && storage().use_count() == 1; }

  const Shape& shape() const { return checked().shape; }
  const Shape& strides() const { return checked().strides; }
  int64_t offset() const { return checked().offset; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;
  int64_t numel() const { return numel_of(shape()); }
  int64_t nbytes() const { return numel() * static_cast<int64_t>(itemsize(dtype())); }
  DType dtype() const { return checked().dtype; }
  Device device() const { return checked().storage->device(); }
  bool is_contiguous() const;
  bool is_pinned() const { return storage()->is_pinned(); }
  const std::shared_ptr<Storage>& storage() const { return checked().storage; }
  uint64_t version() const { return storage()->version(); }
  void bump_version() const { storage()->bump_version(); }

  // Pointer to the first element of this view (storage base + offset).
  void* data_ptr() const;
  template <class T>
  T* data() const {
    return static_cast<T*>(data_ptr());
  }
  double item() const;                    // single-element tensor to double
  std::vector<double> to_vector() const;  // every element, row-major, as double
  std::vector<int64_t> to_int_vector() const;
  std::string str() const;       // printable summary with values (small tensors)
  std::string describe() const;  // "float32[2, 3] on cpu"

  // ---- views and copies that record no graph (core/tensor_views.cpp) ----
  // Tensor's methods of the same names compute their geometry here and then record it.
  TensorBase view(const Shape& shape) const;     // -1 infers one size; fails where a copy is needed
  TensorBase reshape(const Shape& shape) const;  // view when possible, else copy
  TensorBase permute(const std::vector<int64_t>& dims) const;
  TensorBase transpose(int64_t d0, int64_t d1) const;
  TensorBase slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  TensorBase narrow(int64_t dim, int64_t start, int64_t length) const;
  TensorBase expand(const Shape& shape) const;
  TensorBase squeeze(int64_t dim) const;
  TensorBase unsqueeze(int64_t dim) const;
  TensorBase contiguous() const;
  TensorBase clone() const;
  TensorBase to(DType dtype) const;
  TensorBase to(Device device) const;

 protected:
  const TensorImpl& checked() const {
    TS_CHECK(impl_, "use of an undefined (default-constructed) Tensor");
    return *impl_;
  }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// `requested` with its one -1 (if any) filled in from `numel`; fails naming `op` when the
// sizes cannot hold exactly `numel` elements.
Shape infer_shape(const Shape& requested, int64_t numel, const char* op);
// The strides that view `t` as `shape` without copying, or nothing where a copy is needed.
std::optional<Shape> view_strides(const TensorBase& t, const Shape& shape);
// The permutation that swaps dimensions d0 and d1 of a `dim`-dimensional tensor.
std::vector<int64_t> transpose_permutation(int64_t dim, int64_t d0, int64_t d1);
// slice's bounds on a dimension of size n: negative ones counted from the end, both clamped
// into [0, n] with end >= start.
std::pair<int64_t, int64_t> slice_bounds(int64_t n, int64_t start, int64_t end);
// narrow's start on dimension d of t, a negative one counted from the end; fails naming t
// when [start, start + length) is out of bounds.
int64_t narrow_start(const TensorBase& t, int64_t d, int64_t start, int64_t length);
// A contiguous copy of `t` as `dtype` on `device` (the copy kernel casts and moves).
TensorBase copy_to(const TensorBase& t, DType dtype, Device device);

}  // namespace tessera
