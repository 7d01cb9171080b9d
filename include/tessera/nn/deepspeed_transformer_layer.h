// DeepSpeed's DeepSpeedTransformerLayer (the Transformer Kernel API): one BERT-style encoder
// layer with DeepSpeed's parameters, names and semantics. x [B, T, C]; attention_mask is
// DeepSpeed's and HF's additive mask broadcastable to [B, heads, T, T] (0 to attend, -10000
// for padding: HF's extended attention mask), or bool (true = attend).
//
//   Pre-LN:  h = x + drop(attn(LN_norm(x)));      out = h + drop(ffn(LN_attn_n(h)))
//   Post-LN: h = LN_attn_n(x + drop(attn(x)));    out = LN_norm(h + drop(ffn(h)))
//
// attn: one GEMM for q|k|v (attn_qkvw [3C, C]), softmax(q k^T / sqrt(C / heads) + mask) with
// dropout attn_dropout_ratio, the output projection attn_ow; ffn: inter_w, GELU (the tanh form
// DeepSpeed's kernel computes), output_w. Post-LN equals HF's BertLayer with hidden_act
// "gelu_new" (tests/nn/test_deepspeed_transformer.cpp against transformers' own class).
// The biases ride in their GEMMs (the product's epilogue), and each dropout with the
// residual add after it is one fused pass (bias_dropout_add).
//
// Each layer takes the next value of a process-wide counter as its config's layer_id (0, 1,
// ... in creation order), as DeepSpeed's static DeepSpeedTransformerLayer.layer_id.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/nn/deepspeed_transformer_config.h"
#include "tessera/nn/module.h"
#include "tessera/rng.h"

namespace tessera::nn {

class DeepSpeedTransformerLayer : public Module {
 public:
  // Parameters drawn as DeepSpeed's init_transformer_weights: weights N(0, initializer_range)
  // (the output projections N(0, initializer_range / sqrt(2 num_hidden_layers)) with
  // adjust_init_range), biases 0, LayerNorm weights 1.
  DeepSpeedTransformerLayer(Module* parent, const std::string& name,
                            const DeepSpeedTransformerConfig& config);
  // DeepSpeed's initial_weights / initial_biases (its unit tests' form): the q, k, v, attention
  // output, attention LayerNorm, intermediate, output and output LayerNorm tensors in that
  // order (8 each); q, k, v are joined into attn_qkvw and attn_qkvb is zero (initial_biases[0..2]
  // are not read, as in DeepSpeed). Values are copied; shapes are checked by name.
  DeepSpeedTransformerLayer(Module* parent, const std::string& name,
                            const DeepSpeedTransformerConfig& config,
                            const std::vector<Tensor>& initial_weights,
                            const std::vector<Tensor>& initial_biases);

  Tensor forward(const Tensor& hidden_states, const Tensor& attention_mask = {});
  std::string type_name() const override { return "DeepSpeedTransformerLayer"; }
  void reset_parameters() override;
  const DeepSpeedTransformerConfig& config() const { return config_; }

  // The counter's next value (DeepSpeedTransformerLayer.layer_id in DeepSpeed); tests reset it.
  static int64_t next_layer_id();
  static void reset_layer_id(int64_t value = 0);

  Tensor attn_qkvw, attn_qkvb, attn_ow, attn_ob, attn_nw, attn_nb;
  Tensor inter_w, inter_b, output_w, output_b, norm_w, norm_b;

 private:
  void register_all();
  Tensor attention(const Tensor& x, const Tensor& mask);
  // residual + dropout(x) (hidden_dropout_ratio), one fused kernel.
  Tensor drop_add(const Tensor& x, const Tensor& residual);
  Generator& dropout_generator();  // its own with config.seed >= 0, else the default one

  DeepSpeedTransformerConfig config_;
  std::optional<Generator> generator_;  // with config.seed >= 0
};

}  // namespace tessera::nn
