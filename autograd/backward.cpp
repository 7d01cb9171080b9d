// Backward pass: count each node's dependencies reachable from the roots, then run nodes
// once all gradients flowing into them have been summed, latest-created first.
#include "tessera/autograd/backward.h"

#include <unordered_map>

#include "graph_task.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::autograd {

namespace detail {

namespace {
thread_local const std::vector<bool>* g_wanted = nullptr;
}  // namespace

InputGradRequest::InputGradRequest(const std::vector<bool>* wanted) : previous_(g_wanted) {
  g_wanted = wanted;
}
InputGradRequest::~InputGradRequest() {
  g_wanted = previous_;
}

std::shared_ptr<GraphRoot> make_graph_root(const std::vector<Tensor>& roots,
                                           const std::vector<Tensor>& grad_roots) {
  std::vector<Tensor> grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    TS_CHECK(r.requires_grad(), "backward: tensor ", i, " (", r.describe(),
             ") does not require grad and has no grad_fn");
    Tensor g = i < grad_roots.size() ? grad_roots[i] : Tensor();
    if (!g.defined()) {
      TS_CHECK(r.numel() == 1,
               "backward: a gradient can be created implicitly only for scalar "
               "outputs, got ",
               r.describe(), "; pass the output gradient explicitly");
      g = ones(r.shape(), r.dtype(), r.device());
    }
    TS_CHECK(g.shape() == r.shape(), "backward: gradient shape ", shape_str(g.shape()),
             " does not match output shape ", shape_str(r.shape()));
    TS_CHECK(g.device() == r.device(), "backward: gradient ", i, " is on ", g.device().str(),
             ", its output on ", r.device().str());
    if (g.dtype() != r.dtype()) {
      // As torch: the gradient takes its output's dtype (the kernels read both as one dtype).
      TS_CHECK(is_floating(g.dtype()) && is_floating(r.dtype()), "backward: gradient ", i, " (",
               g.describe(), ") cannot stand for output ", r.describe());
      g = g.to(r.dtype());
    }
    grads.push_back(g);
  }
  auto root = std::make_shared<GraphRoot>(grads);
  for (const Tensor& r : roots) root->next_edges.push_back(gradient_edge(r));
  return root;
}

std::vector<Tensor> take_gradients(GradBuffers& buffers, Node* node, bool& any) {
  std::vector<Tensor> in = std::move(buffers[node]);
  buffers.erase(node);
  in.resize(node->num_outputs);
  any = false;
  for (const Tensor& g : in) any = any || g.defined();
  return in;
}

void DependencyCount::enter(const Edge& e, bool counted) {
  if (counted) count_[e.node.get()]++;
  if (!reached_.emplace(e.node.get(), e.node).second) return;
  std::vector<Node*> stack{e.node.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& below : n->next_edges) {
      if (!below.node) continue;
      count_[below.node.get()]++;
      if (reached_.emplace(below.node.get(), below.node).second) stack.push_back(below.node.get());
    }
  }
}

void add_to_buffer(std::vector<Tensor>& buffer, const Node& node, uint32_t input_nr,
                   const Tensor& grad) {
  if (buffer.size() < node.num_outputs) buffer.resize(node.num_outputs);
  Tensor& slot = buffer[input_nr];
  slot = slot.defined() ? add(slot, grad) : grad;
}

}  // namespace detail

bool input_grad_wanted(size_t i) {
  return !detail::g_wanted || (i < detail::g_wanted->size() && (*detail::g_wanted)[i]);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
              bool retain_graph) {
  NoGradGuard no_grad;
  // (Inside a node of a split backward's first part: this one is whole.)
  detail::InputGradRequest every_input(nullptr);
  detail::SplitBackwardScope not_split(nullptr);
  const auto root = detail::make_graph_root(roots, grad_roots);

  // Dependencies: how many edges point at each node.
  detail::DependencyCount deps;
  for (const Edge& e : root->next_edges)
    if (e.node) deps.enter(e, true);

  detail::GradBuffers buffers;
  detail::ReadyQueue ready;
  ready.push(root.get());
  while (!ready.empty()) {
    std::vector<Tensor> in;
    bool any_grad = false;
    Node* n = ready.pop(buffers, in, any_grad);
    any_grad = any_grad || n == root.get();
    // A node no gradient reached passes nothing on (but still releases its inputs' deps).
    std::vector<Tensor> out = any_grad ? n->apply(std::move(in)) : std::vector<Tensor>{};
    if (!retain_graph) n->release_saved();
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.node) continue;
      if (i < out.size() && out[i].defined())
        detail::add_to_buffer(buffers[e.node.get()], *e.node, e.input_nr, out[i]);
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
}

}  // namespace tessera::autograd
