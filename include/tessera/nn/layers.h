// The standard layers. Each takes (parent, name, sizes..., options) and registers itself.
// Default initialisation follows PyTorch; models re-initialise as GPT-2/BERT do (init.h).
#pragma once
#include <memory>
#include <optional>

#include "tessera/nn/module.h"
#include "tessera/nn/module_scope.h"
#include "tessera/ops.h"

namespace tessera::nn {

// A module with one tensor in and one out (what Sequential chains).
class UnaryModule : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  // Calls forward inside this module's scope (module_scope.h), so profilers see the call.
  Tensor operator()(const Tensor& x) {
    ModuleScope scope(*this);
    return forward(x);
  }
};

struct LinearOptions {
  bool bias = true;
  LinearOptions& with_bias(bool b) {
    bias = b;
    return *this;
  }
};

// PyTorch's default initialisations, drawn from the default generator: a linear layer's weight
// and bias (if defined) U(-1/sqrt(in), 1/sqrt(in)); an embedding's weight N(0, 1).
void reset_linear_parameters(Tensor& weight, Tensor& bias, int64_t in_features);
void reset_embedding_parameters(Tensor& weight);

// y = x W^T + b, W [out, in] (PyTorch layout; GPT-2's Conv1D [in, out] is transposed on load).
class Linear : public UnaryModule {
 public:
  Linear(Module* parent, const std::string& name, int64_t in, int64_t out,
         LinearOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  void reset_parameters() override;
  Tensor weight, bias;
  int64_t in_features, out_features;
};

class Embedding : public UnaryModule {
 public:
  Embedding(Module* parent, const std::string& name, int64_t num_embeddings, int64_t dim);
  Tensor forward(const Tensor& indices) override { return embedding(weight, indices); }
  std::string type_name() const override { return "Embedding"; }
  void reset_parameters() override;
  Tensor weight;
};

class LayerNorm : public UnaryModule {
 public:
  // affine: learn a weight; bias: also learn a bias (nanoGPT-style models drop it).
  LayerNorm(Module* parent, const std::string& name, int64_t dim, double eps = 1e-5,
            bool affine = true, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  void reset_parameters() override;
  Tensor weight, bias;
  int64_t dim;
  double eps;
  // Keep the output for backward, not the input (layer_norm_invertible: DeepSpeed's
  // normalize_invertible); gradients equal to rounding.
  bool invertible = false;
};

class Dropout : public UnaryModule {
 public:
  Dropout(Module* parent, const std::string& name, double p);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  std::string type_name() const override { return "Dropout"; }
  double p;
};

class GELU : public UnaryModule {
 public:
  GELU(Module* parent, const std::string& name, GeluApprox approximate = GeluApprox::None)
      : UnaryModule(parent, name), approximate(approximate) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  std::string type_name() const override { return "GELU"; }
  GeluApprox approximate;
};

// fc -> GELU -> proj -> dropout (the transformer feed-forward block).
class MLP : public UnaryModule {
 public:
  MLP(Module* parent, const std::string& name, int64_t dim, int64_t hidden, double dropout_p = 0.0,
      GeluApprox approximate = GeluApprox::None, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MLP"; }
  Linear fc, proj;
  GELU act;
  Dropout drop;
};

// Multi-head attention over the fused attention op: x [B, T, C] -> [B, T, C].
class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(Module* parent, const std::string& name, int64_t dim, int64_t num_heads,
                     bool bias = true, double dropout_p = 0.0);
  // key_padding_mask: bool [B, T], true = a real token. causal masks future positions.
  Tensor forward(const Tensor& x, const Tensor& key_padding_mask = {}, bool causal = false);
  std::string type_name() const override { return "MultiHeadAttention"; }
  Linear q_proj, k_proj, v_proj, out_proj;
  Dropout drop;
  int64_t num_heads;
};

// [B, T, C] -> [B, H, T, C/H] and back.
Tensor split_heads(const Tensor& x, int64_t num_heads);
Tensor merge_heads(const Tensor& x);

// Children named "0", "1", ... appended in order (the storage of ModuleList and Sequential).
template <class Base, class Item>
class IndexedChildren : public Base {
 public:
  using Base::Base;
  template <class M, class... Args>
  M& emplace_back(Args&&... args) {
    auto m = std::make_unique<M>(this, std::to_string(items_.size()), std::forward<Args>(args)...);
    M& ref = *m;
    items_.push_back(std::move(m));
    return ref;
  }
  size_t size() const { return items_.size(); }

 protected:
  std::vector<std::unique_ptr<Item>> items_;
};

class ModuleList : public IndexedChildren<Module, Module> {
 public:
  using IndexedChildren::IndexedChildren;
  Module& operator[](size_t i) { return *items_.at(i); }
  template <class M>
  M& at(size_t i) {
    return dynamic_cast<M&>(*items_.at(i));
  }
  std::string type_name() const override { return "ModuleList"; }
};

// Applies UnaryModules in order.
class Sequential : public IndexedChildren<UnaryModule, UnaryModule> {
 public:
  using IndexedChildren::IndexedChildren;
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
};

}  // namespace tessera::nn
