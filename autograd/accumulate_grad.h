// The node at the end of every leaf's gradient path: sums into `.grad`, then fires hooks.
#pragma once
#include "tessera/autograd/node.h"

namespace tessera::autograd {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) { num_outputs = 1; }
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  Tensor leaf_;
};

}  // namespace tessera::autograd
