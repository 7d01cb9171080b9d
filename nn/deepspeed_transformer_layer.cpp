#include "tessera/nn/deepspeed_transformer_layer.h"

#include <atomic>
#include <cmath>

#include "tessera/error.h"
#include "tessera/grad_mode.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module_scope.h"
#include "tessera/nn/transformer_kernel.h"
#include "tessera/ops.h"

namespace tessera::nn {

namespace {

std::atomic<int64_t>& layer_counter() {
  static std::atomic<int64_t> counter{0};
  return counter;
}

}  // namespace

int64_t DeepSpeedTransformerLayer::next_layer_id() {
  return layer_counter().load();
}

void DeepSpeedTransformerLayer::reset_layer_id(int64_t value) {
  layer_counter().store(value);
}

DeepSpeedTransformerLayer::DeepSpeedTransformerLayer(Module* parent, const std::string& name,
                                                     const DeepSpeedTransformerConfig& config)
    : Module(parent, name), config_(config.checked()) {
  register_all();
  reset_parameters();
}

DeepSpeedTransformerLayer::DeepSpeedTransformerLayer(Module* parent, const std::string& name,
                                                     const DeepSpeedTransformerConfig& config,
                                                     const std::vector<Tensor>& initial_weights,
                                                     const std::vector<Tensor>& initial_biases)
    : Module(parent, name), config_(config.checked()) {
  TS_CHECK(initial_weights.size() == 8 && initial_biases.size() == 8,
           "DeepSpeedTransformerLayer: initial_weights and initial_biases hold 8 tensors each "
           "(q, k, v, attention output, attention LayerNorm, intermediate, output, output "
           "LayerNorm), got ",
           initial_weights.size(), " and ", initial_biases.size());
  register_all();
  NoGradGuard no_grad;
  attn_qkvb.zero_();
  const auto set = [](Tensor& slot, const Tensor& value, const char* what) {
    TS_CHECK(value.defined() && value.shape() == slot.shape(), "DeepSpeedTransformerLayer: ", what,
             " must be ", slot.describe(), ", got ",
             value.defined() ? value.describe() : std::string("an undefined tensor"));
    slot.copy_(value);
  };
  Tensor qkv = cat({initial_weights[0], initial_weights[1], initial_weights[2]}, 0);
  set(attn_qkvw, qkv, "initial_weights[0..2] (q, k, v) joined");
  set(attn_ow, initial_weights[3], "initial_weights[3] (attention output)");
  set(attn_nw, initial_weights[4], "initial_weights[4] (attention LayerNorm)");
  set(inter_w, initial_weights[5], "initial_weights[5] (intermediate)");
  set(output_w, initial_weights[6], "initial_weights[6] (output)");
  set(norm_w, initial_weights[7], "initial_weights[7] (output LayerNorm)");
  set(attn_ob, initial_biases[3], "initial_biases[3] (attention output)");
  set(attn_nb, initial_biases[4], "initial_biases[4] (attention LayerNorm)");
  set(inter_b, initial_biases[5], "initial_biases[5] (intermediate)");
  set(output_b, initial_biases[6], "initial_biases[6] (output)");
  set(norm_b, initial_biases[7], "initial_biases[7] (output LayerNorm)");
}

void DeepSpeedTransformerLayer::register_all() {
  config_.layer_id = layer_counter().fetch_add(1);
  // (unsigned: a seed near the int64 limit wraps instead of overflowing)
  if (config_.seed >= 0)
    generator_.emplace(static_cast<uint64_t>(config_.seed) +
                       static_cast<uint64_t>(config_.layer_id));
  train(config_.training);
  const int64_t C = config_.hidden_size, I = config_.intermediate_size;
  const DType dt = config_.dtype();
  const auto param = [this, dt](const char* name, Tensor* slot, const Shape& shape) {
    register_parameter(name, slot, Tensor::empty(shape, dt));
  };
  // DeepSpeed's order and names.
  param("attn_qkvw", &attn_qkvw, {3 * C, C});
  param("attn_qkvb", &attn_qkvb, {3 * C});
  param("attn_ow", &attn_ow, {C, C});
  param("attn_ob", &attn_ob, {C});
  param("attn_nw", &attn_nw, {C});
  param("attn_nb", &attn_nb, {C});
  param("inter_w", &inter_w, {I, C});
  param("inter_b", &inter_b, {I});
  param("output_w", &output_w, {C, I});
  param("output_b", &output_b, {C});
  param("norm_w", &norm_w, {C});
  param("norm_b", &norm_b, {C});
}

void DeepSpeedTransformerLayer::reset_parameters() {
  NoGradGuard no_grad;
  const double std = config_.initializer_range;
  const double output_std =
      config_.adjust_init_range
          ? std / std::sqrt(2.0 * static_cast<double>(config_.num_hidden_layers))
          : std;
  const auto normal = [](Tensor& t, double s) {
    t.copy_(randn(t.shape(), DType::Float32, t.device()) * s);
  };
  normal(attn_qkvw, std);
  attn_qkvb.zero_();
  normal(attn_ow, output_std);
  attn_ob.zero_();
  attn_nw.fill_(1.0);
  attn_nb.zero_();
  normal(inter_w, std);
  inter_b.zero_();
  normal(output_w, output_std);
  output_b.zero_();
  norm_w.fill_(1.0);
  norm_b.zero_();
}

Generator& DeepSpeedTransformerLayer::dropout_generator() {
  return generator_ ? *generator_ : default_generator();
}

Tensor DeepSpeedTransformerLayer::drop_add(const Tensor& x, const Tensor& residual) {
  return bias_dropout_add(x, {}, residual, config_.hidden_dropout_ratio, is_training(),
                          &dropout_generator());
}

Tensor DeepSpeedTransformerLayer::attention(const Tensor& x, const Tensor& mask) {
  const int64_t C = config_.hidden_size, H = config_.heads;
  const std::vector<Tensor> qkv = split(linear(x, attn_qkvw, attn_qkvb), C, -1);
  const Tensor q = split_heads(qkv[0], H), k = split_heads(qkv[1], H), v = split_heads(qkv[2], H);
  const double scale = 1.0 / std::sqrt(static_cast<double>(C / H));
  // An additive mask needs the probabilities themselves (attn_dropout_checkpoint then keeps
  // them alone); otherwise the fused attention applies the mask and the dropout, keeping none.
  const double p = is_training() ? config_.attn_dropout_ratio : 0.0;
  const Tensor context =
      mask.defined() && mask.dtype() != DType::Bool
          ? probability_attention(q, k, v, mask, scale, false, p, is_training(),
                                  config_.attn_dropout_checkpoint, &dropout_generator())
          : scaled_dot_product_attention(q, k, v, mask, false, scale, p, &dropout_generator());
  return linear(merge_heads(context), attn_ow, attn_ob);
}

Tensor DeepSpeedTransformerLayer::forward(const Tensor& x, const Tensor& attention_mask) {
  ModuleScope scope(*this);
  const int64_t C = config_.hidden_size;
  TS_CHECK(x.dim() == 3 && x.size(2) == C, "DeepSpeedTransformerLayer: hidden_states must be [",
           "batch, seq, hidden_size ", C, "], got ", x.describe());
  TS_CHECK(config_.batch_size < 0 || x.size(0) <= config_.batch_size,
           "DeepSpeedTransformerLayer: batch ", x.size(0),
           " exceeds DeepSpeedTransformerConfig.batch_size ", config_.batch_size);
  TS_CHECK(config_.max_seq_length < 0 || x.size(1) <= config_.max_seq_length,
           "DeepSpeedTransformerLayer: sequence length ", x.size(1),
           " exceeds DeepSpeedTransformerConfig.max_seq_length ", config_.max_seq_length);
  const double eps = config_.layer_norm_eps;
  const Shape width{C};
  // The memory options: each keeps less for backward and recomputes it there.
  const auto norm = [&](const Tensor& in, const Tensor& w, const Tensor& b) {
    return config_.normalize_invertible ? layer_norm_invertible(in, width, w, b, eps)
                                        : layer_norm(in, width, w, b, eps);
  };
  // The biases ride in the GEMMs (their epilogue: no pass of their own, and their gradients
  // come with the weights'); dropout and the residual add are one fused pass.
  const auto ffn = [&](const Tensor& h, const Tensor& residual) {
    const Tensor inner = linear(h, inter_w, inter_b);
    const Tensor out = config_.gelu_checkpoint
                           ? gelu_linear(inner, output_w, output_b, GeluApprox::Tanh)
                           : linear(gelu(inner, GeluApprox::Tanh), output_w, output_b);
    return drop_add(out, residual);
  };
  if (config_.pre_layer_norm) {
    const Tensor h = drop_add(attention(norm(x, norm_w, norm_b), attention_mask), x);
    return ffn(norm(h, attn_nw, attn_nb), h);
  }
  const Tensor h = norm(drop_add(attention(x, attention_mask), x), attn_nw, attn_nb);
  return norm(ffn(h, h), norm_w, norm_b);
}

}  // namespace tessera::nn
