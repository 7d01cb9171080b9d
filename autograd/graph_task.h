// What a backward pass (backward.cpp) and a split one (split_backward.cpp) share: the root
// node that hands the output gradients to the graph, the order nodes run in, and which of a
// node's input gradients the running call asks for.
#pragma once
#include <memory>
#include <queue>
#include <unordered_map>
#include <vector>

#include "tessera/autograd/node.h"
#include "tessera/autograd/split_backward.h"

namespace tessera::autograd::detail {

// Hands the root gradients to the graph as if they were one node's outputs.
class GraphRoot final : public Node {
 public:
  explicit GraphRoot(std::vector<Tensor> grads) : grads_(std::move(grads)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&&) override { return grads_; }
  std::string name() const override { return "GraphRoot"; }

 private:
  std::vector<Tensor> grads_;
};

// The root for backward from `roots` with `grad_roots` (undefined: ones for a scalar),
// checked; its edges lead to the roots' nodes.
std::shared_ptr<GraphRoot> make_graph_root(const std::vector<Tensor>& roots,
                                           const std::vector<Tensor>& grad_roots);

// When several nodes are ready the latest created runs first.
struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// What input_grad_wanted answers on this thread while it lives (null: every input).
class InputGradRequest {
 public:
  explicit InputGradRequest(const std::vector<bool>* wanted);
  ~InputGradRequest();
  InputGradRequest(const InputGradRequest&) = delete;
  InputGradRequest& operator=(const InputGradRequest&) = delete;

 private:
  const std::vector<bool>* previous_;
};

// Which split backward's first part is in progress on this thread while it lives (null:
// none; a plain backward inside a node starts none of its own).
class SplitBackwardScope {
 public:
  explicit SplitBackwardScope(DeferredGrads* in_progress);
  ~SplitBackwardScope();
  SplitBackwardScope(const SplitBackwardScope&) = delete;
  SplitBackwardScope& operator=(const SplitBackwardScope&) = delete;

 private:
  DeferredGrads* previous_;
};

using GradBuffers = std::unordered_map<Node*, std::vector<Tensor>>;

// The gradients summed for `node` (one per output, undefined where none flowed), taken out of
// `buffers`; `any` says whether some flowed.
std::vector<Tensor> take_gradients(GradBuffers& buffers, Node* node, bool& any);

// The nodes whose gradients are complete, the latest created first.
class ReadyQueue {
 public:
  void push(Node* n) { queue_.push(n); }
  bool empty() const { return queue_.empty(); }
  // The next node, with its gradients out of `buffers` (`any`: whether some flowed).
  Node* pop(GradBuffers& buffers, std::vector<Tensor>& grads, bool& any) {
    Node* n = queue_.top();
    queue_.pop();
    grads = take_gradients(buffers, n, any);
    return n;
  }

 private:
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> queue_;
};

// How many edges point at each node reached from some start edges (a start edge counts when
// entered as counted; every edge below counts), every node reached kept alive.
class DependencyCount {
 public:
  // Counts `e` if `counted`, and the first time its node is reached, every edge below it.
  void enter(const Edge& e, bool counted);
  // The count left for `n`; the caller decrements it as gradients arrive.
  int& operator[](Node* n) { return count_[n]; }
  const std::unordered_map<Node*, std::shared_ptr<Node>>& reached() const { return reached_; }

 private:
  std::unordered_map<Node*, int> count_;
  std::unordered_map<Node*, std::shared_ptr<Node>> reached_;
};

// Sums `grad` into slot `input_nr` of `node`'s pending output gradients.
void add_to_buffer(std::vector<Tensor>& buffer, const Node& node, uint32_t input_nr,
                   const Tensor& grad);

}  // namespace tessera::autograd::detail
