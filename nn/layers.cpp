#include "tessera/nn/layers.h"

#include <cmath>

#include "tessera/grad_mode.h"

namespace tessera::nn {

namespace {
// U(-bound, bound) from the default generator, written into an existing parameter.
void uniform_(Tensor& t, double bound) {
  NoGradGuard no_grad;
  t.copy_(rand(t.shape(), t.dtype(), t.device()) * (2 * bound) - bound);
}
}  // namespace

Linear::Linear(Module* parent, const std::string& name, int64_t in, int64_t out,
               LinearOptions options)
    : UnaryModule(parent, name), in_features(in), out_features(out) {
  register_parameter("weight", &weight, Tensor::empty({out, in}));
  if (options.bias) register_parameter("bias", &bias, Tensor::empty({out}));
  reset_parameters();
}

void reset_linear_parameters(Tensor& weight, Tensor& bias, int64_t in_features) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(in_features, 1)));
  uniform_(weight, bound);  // PyTorch's kaiming_uniform(a=sqrt(5)) reduces to this bound
  if (bias.defined()) uniform_(bias, bound);
}

void reset_embedding_parameters(Tensor& weight) {
  NoGradGuard no_grad;
  weight.copy_(randn(weight.shape(), weight.dtype(), weight.device()));
}

void Linear::reset_parameters() {
  reset_linear_parameters(weight, bias, in_features);
}

Tensor Linear::forward(const Tensor& x) {
  ModuleScope scope(*this);
  TS_CHECK(x.dim() >= 1 && x.shape().back() == in_features, "Linear '", name(),
           "': expected input [..., ", in_features, "], got ", x.describe());
  return linear(x, weight, bias);
}

Embedding::Embedding(Module* parent, const std::string& name, int64_t n, int64_t dim)
    : UnaryModule(parent, name) {
  register_parameter("weight", &weight, Tensor::empty({n, dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  reset_embedding_parameters(weight);
}

LayerNorm::LayerNorm(Module* parent, const std::string& name, int64_t dim, double eps, bool affine,
                     bool with_bias)
    : UnaryModule(parent, name), dim(dim), eps(eps) {
  if (affine) register_parameter("weight", &weight, ones({dim}));
  if (affine && with_bias) register_parameter("bias", &bias, zeros({dim}));
}

void LayerNorm::reset_parameters() {
  NoGradGuard no_grad;
  if (weight.defined()) weight.fill_(1.0);
  if (bias.defined()) bias.fill_(0.0);
}

Tensor LayerNorm::forward(const Tensor& x) {
  ModuleScope scope(*this);
  return invertible ? layer_norm_invertible(x, {dim}, weight, bias, eps)
                    : layer_norm(x, {dim}, weight, bias, eps);
}

Dropout::Dropout(Module* parent, const std::string& name, double p)
    : UnaryModule(parent, name), p(p) {
  TS_CHECK(p >= 0.0 && p <= 1.0, "Dropout '", name, "': probability must be in [0, 1], got ", p);
}

MLP::MLP(Module* parent, const std::string& name, int64_t dim, int64_t hidden, double dropout_p,
         GeluApprox approximate, bool bias)
    : UnaryModule(parent, name),
      fc(this, "fc", dim, hidden, LinearOptions().with_bias(bias)),
      proj(this, "proj", hidden, dim, LinearOptions().with_bias(bias)),
      act(this, "act", approximate),
      drop(this, "drop", dropout_p) {}

Tensor MLP::forward(const Tensor& x) {
  ModuleScope scope(*this);
  return drop(proj(act(fc(x))));
}

Tensor split_heads(const Tensor& x, int64_t num_heads) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  TS_CHECK(C % num_heads == 0, "split_heads: width ", C, " is not divisible by ", num_heads,
           " heads");
  return x.view({B, T, num_heads, C / num_heads}).transpose(1, 2);
}

Tensor merge_heads(const Tensor& x) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  return x.transpose(1, 2).reshape({B, T, H * D});
}

MultiHeadAttention::MultiHeadAttention(Module* parent, const std::string& name, int64_t dim,
                                       int64_t heads, bool bias, double dropout_p)
    : Module(parent, name),
      q_proj(this, "q_proj", dim, dim, LinearOptions().with_bias(bias)),
      k_proj(this, "k_proj", dim, dim, LinearOptions().with_bias(bias)),
      v_proj(this, "v_proj", dim, dim, LinearOptions().with_bias(bias)),
      out_proj(this, "out_proj", dim, dim, LinearOptions().with_bias(bias)),
      drop(this, "drop", dropout_p),
      num_heads(heads) {
  TS_CHECK(dim % heads == 0, "MultiHeadAttention '", name, "': dim ", dim, " is not divisible by ",
           heads, " heads");
}

Tensor MultiHeadAttention::forward(const Tensor& x, const Tensor& key_padding_mask, bool causal) {
  ModuleScope scope(*this);
  TS_CHECK(x.dim() == 3, "MultiHeadAttention '", name(), "': expected [B, T, C], got ",
           x.describe());
  Tensor mask;
  if (key_padding_mask.defined()) mask = key_padding_mask.unsqueeze(1).unsqueeze(1);  // [B,1,1,T]
  const Tensor o = scaled_dot_product_attention(split_heads(q_proj(x), num_heads),
                                                split_heads(k_proj(x), num_heads),
                                                split_heads(v_proj(x), num_heads), mask, causal);
  return drop(out_proj(merge_heads(o)));
}

Tensor Sequential::forward(const Tensor& x) {
  ModuleScope scope(*this);
  Tensor h = x;
  for (auto& m : items_) h = m->forward(h);
  return h;
}

}  // namespace tessera::nn
