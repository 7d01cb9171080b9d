// Tensor: TensorBase (core: storage, geometry, element access) plus what the autograd layer
// defines: views and copies recorded in the graph (autograd/ops_shape.cpp), gradients and
// backward (autograd/tensor_autograd.cpp), in-place ops that refuse to break the graph.
// Copying a Tensor copies the handle, never the data (like torch.Tensor).
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <vector>

#include "tessera/tensor_base.h"

namespace tessera {

namespace autograd {
class Node;
}  // namespace autograd

class Tensor : public TensorBase {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : TensorBase(std::move(impl)) {}
  // The same tensor seen with its autograd methods (a kernel's output, a core view).
  explicit Tensor(TensorBase base) : TensorBase(std::move(base)) {}

  // Uninitialised contiguous memory.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32,
                      Device device = Device::cpu()) {
    return Tensor(TensorBase::empty(shape, dtype, device));
  }
  // Uninitialised contiguous host memory that is page-locked (see pin_memory).
  static Tensor empty_pinned(const Shape& shape, DType dtype = DType::Float32) {
    return Tensor(TensorBase::empty_pinned(shape, dtype));
  }
  // A view sharing `base`'s storage with the given geometry (no autograd recording).
  static Tensor make_view(const TensorBase& base, Shape shape, Shape strides, int64_t offset) {
    return Tensor(TensorBase::make_view(base, std::move(shape), std::move(strides), offset));
  }

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
};

}  // namespace tessera
