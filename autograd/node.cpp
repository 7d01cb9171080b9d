#include "tessera/autograd/node.h"

#include <atomic>

#include "accumulate_grad.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

// A recorded op: its backward lambda owns whatever it captured; releasing it frees them.
class LambdaNode final : public Node {
 public:
  LambdaNode(std::string name, BackwardFn fn, std::vector<Tensor> saved,
             std::vector<Tensor> outputs_meta)
      : name_(std::move(name)), fn_(std::move(fn)) {
    for (const Tensor& t : saved) saved_.emplace_back(t);
    for (const Tensor& t : outputs_meta) {
      output_shapes_.push_back(t.shape());
      output_dtypes_.push_back(t.dtype());
      output_devices_.push_back(t.device());
    }
    num_outputs = static_cast<uint32_t>(outputs_meta.size());
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
    TS_CHECK(fn_, name_,
             ": trying to run backward through the graph a second time (its saved "
             "tensors were freed); pass retain_graph=true to the first backward");
    for (const SavedTensor& s : saved_) s.unpack(name_);
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined())
        grads[i] = zeros(output_shapes_[i], output_dtypes_[i], output_devices_[i]);
    return fn_(grads);
  }
  std::string name() const override { return name_; }
  void release_saved() override {
    fn_ = nullptr;
    for (SavedTensor& s : saved_) s.release();
  }

 private:
  std::string name_;
  BackwardFn fn_;
  std::vector<SavedTensor> saved_;
  std::vector<Shape> output_shapes_;
  std::vector<DType> output_dtypes_;
  std::vector<Device> output_devices_;
};
}  // namespace

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1)) {}

Tensor SavedTensor::unpack(const std::string& op) const {
  TS_CHECK(!released_, op,
           ": saved tensors were already freed by a previous backward; pass "
           "retain_graph=true to backward the same graph twice");
  if (tensor_.defined()) {
    TS_CHECK(tensor_.version() == version_, op, ": a tensor it saved for backward (",
             tensor_.describe(), ") was modified by an in-place operation: it is at version ",
             tensor_.version(), ", expected version ", version_,
             ". Use an out-of-place op, or clone() the tensor before modifying it.");
  }
  return tensor_;
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  Tensor g = std::move(grads[0]);
  auto& meta = *leaf_.impl()->autograd;
  if (g.dtype() != leaf_.dtype()) g = g.to(leaf_.dtype());
  if (!meta.grad.defined()) {
    // Take ownership only when nothing else can see this tensor or its memory: one gradient
    // tensor can flow to several leaves (add's backward hands the same one to both inputs).
    const bool exclusive = g.is_unique() && g.is_contiguous() && g.shape() == leaf_.shape();
    meta.grad = exclusive ? g : g.contiguous().clone();
    if (meta.grad.shape() != leaf_.shape()) meta.grad = meta.grad.reshape(leaf_.shape());
  } else {
    meta.grad.add_(g);
  }
  for (auto& hook : meta.hooks) hook(meta.grad);
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd) return {};
  auto& meta = *t.impl()->autograd;
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  if (!meta.requires_grad) return {};
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

bool record(const std::string& name, const std::vector<Tensor>& inputs,
            std::vector<Tensor>& outputs, BackwardFn backward, std::vector<Tensor> saved) {
  if (!grad_enabled() || !any_requires_grad(inputs)) return false;
  auto node = std::make_shared<LambdaNode>(name, std::move(backward), std::move(saved), outputs);
  for (const Tensor& t : inputs)
    node->next_edges.push_back(t.defined() && t.requires_grad() ? gradient_edge(t) : Edge{});
  for (size_t i = 0; i < outputs.size(); ++i) {
    auto meta = std::make_shared<AutogradMeta>();
    meta->requires_grad = true;
    meta->grad_fn = node;
    meta->output_nr = static_cast<uint32_t>(i);
    outputs[i].impl()->autograd = std::move(meta);
  }
  return true;
}

}  // namespace tessera::autograd
