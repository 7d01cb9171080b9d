// Tensor: a handle to a strided view over shared, reference-counted Storage.
// Copying a Tensor copies the handle, never the data (like torch.Tensor).
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "tessera/device.h"
#include "tessera/dtype.h"
#include "tessera/error.h"
#include "tessera/shape.h"
#include "tessera/storage.h"

namespace tessera {

namespace autograd {
struct AutogradMeta;  // defined by the autograd layer; core only carries the pointer
class Node;
}  // namespace autograd

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;       // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::Float32;
  std::shared_ptr<autograd::AutogradMeta> autograd;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialised contiguous memory.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32,
                      Device device = Device::cpu());
  // Uninitialised contiguous host memory that is page-locked (see pin_memory).
  static Tensor empty_pinned(const Shape& shape, DType dtype = DType::Float32);
  // A view sharing `base`'s storage with the given geometry (no autograd recording).
  static Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }
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

  // ---- views (no copy); recorded by autograd when grad is enabled ----
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;  // view when possible, else copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  // A contiguous copy in page-locked host memory (this tensor when it already is pinned), as
  // torch.Tensor.pin_memory: copies from it to a GPU run at full bus speed and return before
  // they finish. Needs the CUDA backend and a GPU.
  Tensor pin_memory() const;

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool value = true);
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  bool is_leaf() const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  Tensor detach() const;
  // Backward from this tensor: a scalar when `gradient` is undefined, else any shape.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // Gradient-ready hook on a leaf: called once per backward, after its .grad is final.
  void register_hook(std::function<void(const Tensor& grad)> hook) const;

  // ---- in-place (bump the version counter) ----
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& masked_fill_(const Tensor& mask, double value);

 private:
  const TensorImpl& checked() const {
    TS_CHECK(impl_, "use of an undefined (default-constructed) Tensor");
    return *impl_;
  }
  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace tessera
