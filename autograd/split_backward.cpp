// The two parts of a split backward: the nodes on paths to the chosen inputs first, asked
// for those paths' gradients; then what they left (nodes asked again, gradients computed
// early) through the rest of the graph, in backward()'s order.
#include "tessera/autograd/split_backward.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "graph_task.h"
#include "tessera/grad_mode.h"

namespace tessera::autograd {

namespace {

thread_local DeferredGrads* g_in_progress = nullptr;

// The graph below a root: each node's owner, and whether the first part runs it: it leads to
// one of `targets`, or its gradient reaches two leaves or more (the chain of activations on a
// stage whose inputs carry no gradient). The rest is what a single leaf's gradient alone
// flows through: a weight's own backward (its transposes, casts, embedding lookups).
struct PathGraph {
  std::unordered_map<Node*, std::shared_ptr<Node>> owner;
  std::unordered_map<Node*, bool> leads;
};

// The leaves a node's gradient reaches: none, one (which), or several.
struct Reach {
  bool target = false;
  const Node* leaf = nullptr;
  bool several = false;
  void add(const Reach& r) {
    target = target || r.target;
    several = several || r.several || (leaf && r.leaf && leaf != r.leaf);
    if (!leaf) leaf = r.leaf;
  }
  bool first_part() const { return target || several; }
};

PathGraph paths_to(const std::shared_ptr<Node>& root, const std::unordered_set<Node*>& targets) {
  PathGraph g;
  struct Frame {
    Node* node;
    size_t next_edge;
    Reach reach;
  };
  auto start = [&](Node* n) {
    Frame f{n, 0, {}};
    f.reach.target = targets.count(n) > 0;
    bool leaf = true;
    for (const Edge& e : n->next_edges) leaf = leaf && !e.node;
    if (leaf && !f.reach.target) f.reach.leaf = n;
    return f;
  };
  std::unordered_map<Node*, Reach> done;
  g.owner[root.get()] = root;
  std::vector<Frame> stack{start(root.get())};
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next_edge < f.node->next_edges.size()) {
      const Edge& e = f.node->next_edges[f.next_edge++];
      if (!e.node) continue;
      if (const auto d = done.find(e.node.get()); d != done.end())
        f.reach.add(d->second);
      else if (g.owner.emplace(e.node.get(), e.node).second)
        stack.push_back(start(e.node.get()));
      continue;
    }
    // Every child is done (the graph has no cycles): this node's answer is known.
    const Reach reach = f.reach;
    done[f.node] = reach;
    g.leads[f.node] = reach.first_part();
    stack.pop_back();
    if (!stack.empty()) stack.back().reach.add(reach);
  }
  return g;
}

}  // namespace

namespace detail {
SplitBackwardScope::SplitBackwardScope(DeferredGrads* in_progress) : previous_(g_in_progress) {
  g_in_progress = in_progress;
}
SplitBackwardScope::~SplitBackwardScope() {
  g_in_progress = previous_;
}
}  // namespace detail

DeferredGrads* split_backward_in_progress() {
  return g_in_progress;
}

DeferredGrads backward_inputs(const std::vector<Tensor>& roots,
                              const std::vector<Tensor>& grad_roots,
                              const std::vector<Tensor>& inputs, bool retain_graph) {
  NoGradGuard no_grad;
  const std::shared_ptr<Node> root = detail::make_graph_root(roots, grad_roots);
  std::unordered_set<Node*> targets;
  for (const Tensor& t : inputs)
    if (Node* n = gradient_edge(t).node.get()) targets.insert(n);
  const PathGraph graph = paths_to(root, targets);
  auto on_path = [&](const Edge& e) { return e.node && graph.leads.at(e.node.get()); };
  // The nodes on paths wait for each other only (a node's parents lead where it leads).
  std::unordered_map<Node*, int> deps;
  for (const auto& [n, leads] : graph.leads)
    if (leads || n == root.get())
      for (const Edge& e : n->next_edges)
        if (on_path(e)) deps[e.node.get()]++;

  DeferredGrads rest;
  rest.retain_graph_ = retain_graph;
  detail::SplitBackwardScope in_progress(&rest);
  detail::GradBuffers buffers;
  detail::ReadyQueue ready;
  ready.push(root.get());
  while (!ready.empty()) {
    std::vector<Tensor> in;
    bool any_grad = false;
    Node* n = ready.pop(buffers, in, any_grad);
    any_grad = any_grad || n == root.get();
    std::vector<bool> wanted(n->next_edges.size()), later(n->next_edges.size());
    bool off_path = false;
    for (size_t i = 0; i < wanted.size(); ++i) {
      wanted[i] = on_path(n->next_edges[i]);
      later[i] = n->next_edges[i].node && !wanted[i];
      off_path = off_path || later[i];
    }
    std::vector<Tensor> out, asked_with;
    const bool asked_now = std::find(wanted.begin(), wanted.end(), true) != wanted.end();
    if (any_grad && off_path && !asked_now) {  // (every gradient it gives is for the second)
      rest.kept_.push_back({graph.owner.at(n), std::move(in), std::move(later)});
      continue;
    }
    if (any_grad) {
      if (off_path) asked_with = in;
      detail::InputGradRequest ask(&wanted);
      out = n->apply(std::move(in));
    }
    // What the node computed off the paths waits as tensors; what it skipped, as the node.
    bool ask_again = false;
    for (size_t i = 0; i < later.size(); ++i) {
      if (!later[i] || !any_grad) continue;
      if (i < out.size() && out[i].defined())
        rest.computed_.push_back({n->next_edges[i], out[i]});
      else
        ask_again = true;
    }
    if (ask_again)
      rest.kept_.push_back({graph.owner.at(n), std::move(asked_with), std::move(later)});
    else if (!retain_graph)
      n->release_saved();
    for (size_t i = 0; i < wanted.size(); ++i) {
      if (!wanted[i]) continue;
      const Edge& e = n->next_edges[i];
      if (i < out.size() && out[i].defined())
        detail::add_to_buffer(buffers[e.node.get()], *e.node, e.input_nr, out[i]);
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
  return rest;
}

void DeferredGrads::absorb(DeferredGrads&& other) {
  for (Kept& k : other.kept_) kept_.push_back(std::move(k));
  for (Computed& c : other.computed_) computed_.push_back(std::move(c));
  other.kept_.clear();
  other.computed_.clear();
}

void DeferredGrads::run() {
  NoGradGuard no_grad;
  detail::SplitBackwardScope not_split(nullptr);
  const std::vector<Kept> kept = std::move(kept_);
  const std::vector<Computed> computed = std::move(computed_);
  kept_.clear();
  computed_.clear();
  // The nodes behind the kept ones and the early gradients (already summed: not waited for),
  // with their dependencies.
  std::unordered_map<Node*, const Kept*> kept_of;
  detail::DependencyCount deps;
  detail::GradBuffers buffers;
  for (const Kept& k : kept) {
    kept_of[k.node.get()] = &k;
    for (size_t i = 0; i < k.wanted.size(); ++i)
      if (k.wanted[i]) deps.enter(k.node->next_edges[i], true);
  }
  for (const Computed& c : computed) {
    detail::add_to_buffer(buffers[c.edge.node.get()], *c.edge.node, c.edge.input_nr, c.grad);
    deps.enter(c.edge, false);
  }
  detail::ReadyQueue ready;
  for (const Kept& k : kept) ready.push(k.node.get());
  for (const auto& [n, owner] : deps.reached())
    if (deps[n] == 0) ready.push(n);
  while (!ready.empty()) {
    std::vector<Tensor> in;
    bool any_grad = false;
    Node* n = ready.pop(buffers, in, any_grad);
    const auto k = kept_of.find(n);
    const Kept* asked = k == kept_of.end() ? nullptr : k->second;
    if (asked) {
      in = asked->grads;
      in.resize(n->num_outputs);
      any_grad = std::any_of(in.begin(), in.end(), [](const Tensor& g) { return g.defined(); });
    }
    std::vector<Tensor> out;
    if (any_grad) {
      detail::InputGradRequest ask(asked ? &asked->wanted : nullptr);
      out = n->apply(std::move(in));
    }
    if (!retain_graph_) n->release_saved();
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.node || (asked && !asked->wanted[i])) continue;
      if (i < out.size() && out[i].defined())
        detail::add_to_buffer(buffers[e.node.get()], *e.node, e.input_nr, out[i]);
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
}

}  // namespace tessera::autograd
