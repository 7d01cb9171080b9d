// GPT-2 (Radford et al. 2019) as Hugging Face lays it out: pre-LayerNorm blocks, learned
// positions, tanh-GELU MLP, LM head tied to the token embedding.
#pragma once
#include <string>

#include "tessera/models/kv_cache.h"
#include "tessera/models/pretrained.h"
#include "tessera/nn/layers.h"
#include "tessera/parallel/activation_checkpointing.h"

namespace tessera::models {

struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0 = 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  double dropout = 0.1;  // resid, embd and attn (attention dropout is not applied: fused kernel)
  bool bias = true;      // Linear and LayerNorm biases (nanoGPT trains without)
  GeluApprox activation = GeluApprox::Tanh;  // HF "gelu_new"

  // "gpt2" (124M), "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny" (tests)
  static GPT2Config named(const std::string& name);
  static GPT2Config from_json(const std::string& json_text);  // HF config.json
  std::string to_json() const;
  void validate() const;
};

class GPT2Attention : public nn::Module {
 public:
  GPT2Attention(Module* parent, const std::string& name, const GPT2Config& c);
  Tensor forward(const Tensor& x, KVCache* cache, size_t layer);
  nn::Linear c_attn, c_proj;
  nn::Dropout resid_dropout;
  int64_t n_head;
};

class GPT2MLP : public nn::Module {
 public:
  GPT2MLP(Module* parent, const std::string& name, const GPT2Config& c);
  Tensor forward(const Tensor& x);
  nn::Linear c_fc, c_proj;
  nn::Dropout dropout;
  GeluApprox activation;
};

class GPT2Block : public nn::Module {
 public:
  GPT2Block(Module* parent, const std::string& name, const GPT2Config& c);
  Tensor forward(const Tensor& x, KVCache* cache, size_t layer);
  nn::LayerNorm ln_1;
  GPT2Attention attn;
  nn::LayerNorm ln_2;
  GPT2MLP mlp;
};

class GPT2Model : public nn::Module {
 public:
  GPT2Model(Module* parent, const std::string& name, const GPT2Config& c);
  Tensor forward(const Tensor& input_ids, KVCache* cache = nullptr);  // hidden states [B, T, C]
  nn::Embedding wte, wpe;
  nn::Dropout drop;
  nn::ModuleList h;
  nn::LayerNorm ln_f;
  GPT2Config config;
  // Set: training forwards run the blocks through activation checkpoints (not with a cache).
  std::shared_ptr<parallel::ActivationCheckpointing> activation_checkpointing;
};

class GPT2LMHeadModel : public PretrainedModel {
 public:
  explicit GPT2LMHeadModel(const GPT2Config& c);
  // Logits [B, T, vocab]; with a cache, input_ids are the positions after cache->length.
  Tensor forward(const Tensor& input_ids, KVCache* cache = nullptr);

  std::string type_name() const override { return "GPT2LMHeadModel"; }
  std::string model_type() const override { return "gpt2"; }
  Tensor logits(const Batch& b) override { return forward(b.input_ids); }
  Tensor loss(const Batch& b) override;
  std::vector<HFWeight> hf_weights() override;
  std::string hf_prefix() const override { return "transformer."; }
  bool hf_ignorable(const std::string& key) const override;
  std::string config_json() const override { return config.to_json(); }
  int64_t vocab_size() const override { return config.vocab_size; }
  int64_t context_length() const override { return config.n_positions; }
  Tensor forward_cached(const Tensor& input_ids, KVCache& cache) override {
    return forward(input_ids, &cache);
  }
  std::unique_ptr<PretrainedModel> hf_export_model() const override;
  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)),
  // zero biases, unit LayerNorm weights. Uses the default generator.
  void init_weights();

  GPT2Model transformer;
  GPT2Config config;
};

}  // namespace tessera::models
