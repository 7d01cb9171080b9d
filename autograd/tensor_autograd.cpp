// Tensor's autograd accessors and in-place ops.
#include "op_util.h"
#include "tessera/autograd/backward.h"

namespace tessera {

using autograd::AutogradMeta;

namespace {
AutogradMeta& meta_of(const Tensor& t) {
  auto& m = t.impl()->autograd;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}

// In-place writes may not silently detach a tensor from the graph.
void check_inplace(const Tensor& t, const char* op) {
  if (!grad_enabled() || !t.requires_grad()) return;
  fail(op, ": in-place modification of ", t.describe(),
       t.is_leaf()
           ? ", a leaf that requires grad; do it under NoGradGuard (as an optimizer does)"
           : ", which is part of the autograd graph, is not supported; use the out-of-place op");
}
}  // namespace

bool Tensor::requires_grad() const {
  const auto& m = checked().autograd;
  return m && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool value) {
  TS_CHECK(!value || is_floating(dtype()),
           "requires_grad_: only floating-point tensors can "
           "require gradients, got ",
           describe());
  TS_CHECK(is_leaf(), "requires_grad_: can only be set on leaf tensors (", describe(),
           " was produced by ", grad_fn()->name(), "); use detach() first");
  meta_of(*this).requires_grad = value;
  return *this;
}

Tensor Tensor::grad() const {
  const auto& m = checked().autograd;
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& grad) const {
  TS_CHECK(!grad.defined() || grad.shape() == shape(), "set_grad: gradient ", grad.describe(),
           " does not match ", describe());
  meta_of(*this).grad = grad;
}

bool Tensor::is_leaf() const {
  const auto& m = checked().autograd;
  return !m || !m->grad_fn;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const auto& m = checked().autograd;
  return m ? m->grad_fn : nullptr;
}

Tensor Tensor::detach() const {
  return make_view(*this, shape(), strides(), offset());
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

void Tensor::register_hook(std::function<void(const Tensor&)> hook) const {
  TS_CHECK(is_leaf() && requires_grad(),
           "register_hook: gradient-ready hooks attach to leaf "
           "tensors that require grad, got ",
           describe());
  meta_of(*this).hooks.push_back(std::move(hook));
}

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  if (is_contiguous()) {
    TensorBase outs[1] = {*this};
    KernelAttrs a;
    a.scalar = value;
    run_kernel(Kernel::fill, device(), dtype(), {}, outs, a);
  } else {
    copy_(full({}, value, dtype(), device()));
    return *this;
  }
  bump_version();
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  NoGradGuard no_grad;
  const Tensor s = src.expand(shape());
  const TensorBase ins[1] = {s.detach()};
  TensorBase outs[1] = {detach()};
  const Device run_on = src.device().is_cuda() ? src.device() : device();
  run_kernel(Kernel::copy, run_on, dtype(), ins, outs);
  bump_version();
  return *this;
}

namespace {
// Writes `value` (already computed out of place) into `self`.
Tensor& assign(Tensor& self, const Tensor& value) {
  NoGradGuard no_grad;
  return self.copy_(value);
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace(*this, "add_");
  NoGradGuard no_grad;
  return assign(*this, add(*this, alpha == 1.0 ? other : other * alpha));
}

Tensor& Tensor::mul_(const Tensor& other) {
  check_inplace(*this, "mul_");
  NoGradGuard no_grad;
  return assign(*this, mul(*this, other));
}

Tensor& Tensor::mul_(double value) {
  check_inplace(*this, "mul_");
  NoGradGuard no_grad;
  return assign(*this, *this * value);
}

Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  check_inplace(*this, "masked_fill_");
  NoGradGuard no_grad;
  return assign(*this, masked_fill(*this, mask, value));
}

}  // namespace tessera
