// The recorded graph: each op that needs a gradient leaves a Node pointing at the Nodes
// of its inputs. Leaves end in an AccumulateGrad node that writes `.grad`.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: that input needs no gradient
  uint32_t input_nr = 0;       // which of node's outputs-gradients this edge feeds
};

// A tensor saved for backward, with the version it had; unpacking a tensor that was
// modified in place since then is an error naming the op. Kept detached (the same storage
// and version counter, no autograd history): an op that saves its own output would otherwise
// hold itself through the output's grad_fn, and a graph never run backward would never be
// freed.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t)
      : tensor_(t.defined() ? t.detach() : t), version_(t.defined() ? t.version() : 0) {}
  Tensor unpack(const std::string& op) const;
  void release() {
    tensor_ = Tensor();
    released_ = true;
  }

 private:
  Tensor tensor_;
  uint64_t version_ = 0;
  bool released_ = false;
};

class Node {
 public:
  Node();
  virtual ~Node() = default;
  // Given d(loss)/d(outputs) (undefined where no gradient flowed), returns d(loss)/d(inputs),
  // one per next_edges entry (undefined where the input needs none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  uint64_t sequence_nr;  // creation order; later nodes run first when several are ready
};

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // leaves only
  std::vector<std::function<void(const Tensor&)>> hooks;
};

// The edge a gradient for `t` should flow along (its grad_fn, or its leaf accumulator).
Edge gradient_edge(const Tensor& t);

// Backward function of a recorded op: receives output gradients, returns input gradients.
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;

// Records `outputs` as produced from `inputs` by an op named `name` whose gradient is
// `backward`. Does nothing (and returns false) unless grad mode is on and some input
// requires grad. `saved` tensors are version-checked before `backward` runs.
bool record(const std::string& name, const std::vector<Tensor>& inputs,
            std::vector<Tensor>& outputs, BackwardFn backward, std::vector<Tensor> saved = {});

bool any_requires_grad(const std::vector<Tensor>& inputs);

// Inside a node's backward: whether this call asks for the gradient of its input `i`
// (record()'s inputs, in order). A plain backward asks for every one; each part of a split
// backward (split_backward.h) asks for some. An op may skip the others (linear and matmul do,
// so the weights' products wait for the second part) or compute them anyway (they are kept).
bool input_grad_wanted(size_t i);

}  // namespace tessera::autograd
