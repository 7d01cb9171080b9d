// User-defined differentiable ops: give a forward and a backward, get autograd support.
//
//   auto y = tessera::autograd::CustomFunction::apply(
//       {x},
//       [](FunctionContext& ctx, const std::vector<Tensor>& in) {
//         ctx.save_for_backward({in[0]});
//         return std::vector<Tensor>{in[0] * in[0]};
//       },
//       [](FunctionContext& ctx, const std::vector<Tensor>& grad_out) {
//         return std::vector<Tensor>{grad_out[0] * ctx.saved()[0] * 2.0};
//       })[0];
#pragma once
#include <any>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::autograd {

class FunctionContext {
 public:
  void save_for_backward(const std::vector<Tensor>& tensors);
  std::vector<Tensor> saved() const;     // version-checked
  std::map<std::string, std::any> data;  // non-tensor state for backward

 private:
  friend class CustomFunction;
  std::vector<Tensor> saved_;
  std::vector<uint64_t> versions_;
  std::string name_ = "CustomFunction";
};

class CustomFunction {
 public:
  using Forward = std::function<std::vector<Tensor>(FunctionContext&, const std::vector<Tensor>&)>;
  // Must return one gradient per input (undefined for inputs that need none).
  using Backward =
      std::function<std::vector<Tensor>(FunctionContext&, const std::vector<Tensor>& grad_outputs)>;

  // Runs forward with recording off, then records one node whose gradient is `backward`.
  // Output gradients that did not flow arrive as zeros.
  static std::vector<Tensor> apply(const std::vector<Tensor>& inputs, Forward forward,
                                   Backward backward, const std::string& name = "CustomFunction");
};

}  // namespace tessera::autograd
