// Backward in two parts, for zero-bubble pipeline schedules (Qi et al. 2023): the gradients
// of chosen inputs first (a stage's input gradient: the next stage back waits for it), the
// weights' later, from what the first part kept.
//
//   autograd::DeferredGrads weights = autograd::backward_inputs({y}, {dy}, {x});
//   send(x.grad());   // ready; no parameter has been touched yet
//   ...
//   weights.run();    // the parameters' gradients and hooks, as backward would have given
//
// The first part runs the nodes on a path from the roots to `inputs`, and those whose
// gradient reaches several leaves (on a stage whose inputs carry none: its chain of
// activations), asking each only for the gradients along those paths (input_grad_wanted).
// What is left is what one leaf's gradient alone flows through: a weight's own backward. A
// node that also feeds it is kept with its output gradients, and run() asks it for the rest,
// then runs the nodes behind. Ops that honour the question (linear, matmul) so leave their weight
// products to run(); the others compute every gradient in the first part and the rest waits
// as tensors. An activation checkpoint reached in the first part splits its rerun's backward
// the same way (the rerun's weight side joins the outer run()).
#pragma once
#include <memory>
#include <vector>

#include "tessera/autograd/node.h"

namespace tessera::autograd {

class DeferredGrads {
 public:
  DeferredGrads() = default;
  DeferredGrads(DeferredGrads&&) noexcept = default;
  DeferredGrads& operator=(DeferredGrads&&) noexcept = default;
  DeferredGrads(const DeferredGrads&) = delete;
  DeferredGrads& operator=(const DeferredGrads&) = delete;

  // The second part: every gradient the first left, into the leaves (hooks fire). Once.
  void run();
  bool empty() const { return kept_.empty() && computed_.empty(); }
  // Takes over `other`'s second part (a checkpoint's rerun inside this first part).
  void absorb(DeferredGrads&& other);

 private:
  friend DeferredGrads backward_inputs(const std::vector<Tensor>&, const std::vector<Tensor>&,
                                       const std::vector<Tensor>&, bool);
  struct Kept {  // a node to ask again, for the inputs `wanted`, with its output gradients
    std::shared_ptr<Node> node;
    std::vector<Tensor> grads;
    std::vector<bool> wanted;
  };
  struct Computed {  // a gradient the first part computed for an edge off its paths
    Edge edge;
    Tensor grad;
  };
  std::vector<Kept> kept_;
  std::vector<Computed> computed_;
  bool retain_graph_ = false;
};

// The first part: backward from `roots` (with `grad_roots`, as backward()) into `inputs`'
// .grad, touching no other leaf. Inputs the roots do not depend on get none.
DeferredGrads backward_inputs(const std::vector<Tensor>& roots,
                              const std::vector<Tensor>& grad_roots,
                              const std::vector<Tensor>& inputs, bool retain_graph = false);

// The split backward whose first part is running on this thread, if any (checkpoints ask).
DeferredGrads* split_backward_in_progress();

}  // namespace tessera::autograd
