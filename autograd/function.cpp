#include "tessera/autograd/function.h"

#include "op_util.h"

namespace tessera::autograd {

void FunctionContext::save_for_backward(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) {
    saved_.push_back(::tessera::detail::untracked(t));
    versions_.push_back(t.defined() ? t.version() : 0);
  }
}

std::vector<Tensor> FunctionContext::saved() const {
  for (size_t i = 0; i < saved_.size(); ++i) {
    TS_CHECK(!saved_[i].defined() || saved_[i].version() == versions_[i], name_, ": saved tensor ",
             i, " (", saved_[i].describe(),
             ") was modified in place after being saved for backward");
  }
  return saved_;
}

std::vector<Tensor> CustomFunction::apply(const std::vector<Tensor>& inputs, Forward forward,
                                          Backward backward, const std::string& name) {
  auto ctx = std::make_shared<FunctionContext>();
  ctx->name_ = name;
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> detached;
    for (const Tensor& t : inputs) detached.push_back(::tessera::detail::untracked(t));
    outputs = forward(*ctx, detached);
  }
  // Outputs that alias inputs get their own handle so that recording leaves inputs intact.
  for (Tensor& o : outputs)
    for (const Tensor& in : inputs)
      if (o.same(in)) o = o.detach();
  const size_t n_in = inputs.size();
  record(name, inputs, outputs, [ctx, backward, n_in, name](const std::vector<Tensor>& g) {
    std::vector<Tensor> grads = backward(*ctx, g);
    TS_CHECK(grads.size() == n_in, name, ": backward returned ", grads.size(), " gradients for ",
             n_in, " inputs");
    return grads;
  });
  return outputs;
}

}  // namespace tessera::autograd
