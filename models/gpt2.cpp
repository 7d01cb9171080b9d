#include "tessera/models/gpt2.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "config_field.h"

#include "tessera/grad_mode.h"

namespace tessera::models {

using json = nlohmann::json;

GPT2Config GPT2Config::named(const std::string& name) {
  GPT2Config c;
  if (name == "gpt2") return c;
  if (name == "gpt2-medium")
    c.n_embd = 1024, c.n_layer = 24, c.n_head = 16;
  else if (name == "gpt2-large")
    c.n_embd = 1280, c.n_layer = 36, c.n_head = 20;
  else if (name == "gpt2-xl")
    c.n_embd = 1600, c.n_layer = 48, c.n_head = 25;
  else if (name == "tiny")
    c.vocab_size = 96, c.n_positions = 32, c.n_embd = 32, c.n_layer = 2, c.n_head = 4;
  else
    fail("unknown GPT-2 size '", name,
         "': expected gpt2, gpt2-medium, gpt2-large, gpt2-xl or tiny");
  return c;
}

GPT2Config GPT2Config::from_json(const std::string& text) {
  const json j = json::parse(text);
  GPT2Config c;
  auto get = [&](const char* key, auto& field) { read_config_field(j, key, field); };
  get("vocab_size", c.vocab_size);
  get("n_positions", c.n_positions);
  get("n_embd", c.n_embd);
  get("n_layer", c.n_layer);
  get("n_head", c.n_head);
  get("n_inner", c.n_inner);
  get("layer_norm_epsilon", c.layer_norm_epsilon);
  get("resid_pdrop", c.dropout);
  get("bias", c.bias);
  const std::string act = j.value("activation_function", std::string("gelu_new"));
  if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
    c.activation = GeluApprox::Tanh;
  else if (act == "gelu")
    c.activation = GeluApprox::None;
  else
    fail("GPT-2 config: activation_function '", act, "' is not supported (gelu_new or gelu)");
  c.validate();
  return c;
}

std::string GPT2Config::to_json() const {
  json j{{"model_type", "gpt2"},
         {"architectures", {"GPT2LMHeadModel"}},
         {"vocab_size", vocab_size},
         {"n_positions", n_positions},
         {"n_ctx", n_positions},
         {"n_embd", n_embd},
         {"n_layer", n_layer},
         {"n_head", n_head},
         {"n_inner", n_inner ? json(n_inner) : json(nullptr)},
         {"layer_norm_epsilon", layer_norm_epsilon},
         {"resid_pdrop", dropout},
         {"embd_pdrop", dropout},
         {"attn_pdrop", dropout},
         {"activation_function", activation == GeluApprox::Tanh ? "gelu_new" : "gelu"},
         {"tie_word_embeddings", true}};
  if (!bias) j["bias"] = false;
  return j.dump(2);
}

void GPT2Config::validate() const {
  TS_CHECK(vocab_size > 0 && n_positions > 0 && n_embd > 0 && n_layer > 0 && n_head > 0,
           "GPT-2 config: sizes must be positive (vocab_size ", vocab_size, ", n_positions ",
           n_positions, ", n_embd ", n_embd, ", n_layer ", n_layer, ", n_head ", n_head, ")");
  TS_CHECK(n_embd % n_head == 0, "GPT-2 config: n_embd ", n_embd, " is not divisible by n_head ",
           n_head);
  TS_CHECK(dropout >= 0 && dropout < 1, "GPT-2 config: dropout must be in [0, 1), got ", dropout);
}

namespace {
nn::LinearOptions bias_opt(const GPT2Config& c) {
  return nn::LinearOptions().with_bias(c.bias);
}
}  // namespace

GPT2Attention::GPT2Attention(Module* parent, const std::string& name, const GPT2Config& c)
    : Module(parent, name),
      c_attn(this, "c_attn", c.n_embd, 3 * c.n_embd, bias_opt(c)),
      c_proj(this, "c_proj", c.n_embd, c.n_embd, bias_opt(c)),
      resid_dropout(this, "resid_dropout", c.dropout),
      n_head(c.n_head) {}

Tensor GPT2Attention::forward(const Tensor& x, KVCache* cache, size_t layer) {
  nn::ModuleScope scope(*this);
  const int64_t C = x.size(2);
  const auto qkv = split(c_attn(x), C, 2);
  Tensor k = nn::split_heads(qkv[1], n_head), v = nn::split_heads(qkv[2], n_head);
  if (cache) {
    if (cache->keys.size() <= layer) {
      cache->keys.resize(layer + 1);
      cache->values.resize(layer + 1);
    }
    if (cache->keys[layer].defined()) {
      k = cat({cache->keys[layer], k}, 2);
      v = cat({cache->values[layer], v}, 2);
    }
    cache->keys[layer] = k;
    cache->values[layer] = v;
  }
  const Tensor attend = cache ? cache->attend : Tensor();  // (padded rows of a batch)
  const Tensor o =
      scaled_dot_product_attention(nn::split_heads(qkv[0], n_head), k, v, attend, true);
  return resid_dropout(c_proj(nn::merge_heads(o)));
}

GPT2MLP::GPT2MLP(Module* parent, const std::string& name, const GPT2Config& c)
    : Module(parent, name),
      c_fc(this, "c_fc", c.n_embd, c.n_inner ? c.n_inner : 4 * c.n_embd, bias_opt(c)),
      c_proj(this, "c_proj", c.n_inner ? c.n_inner : 4 * c.n_embd, c.n_embd, bias_opt(c)),
      dropout(this, "dropout", c.dropout),
      activation(c.activation) {}

Tensor GPT2MLP::forward(const Tensor& x) {
  nn::ModuleScope scope(*this);
  return dropout(c_proj(gelu(c_fc(x), activation)));
}

GPT2Block::GPT2Block(Module* parent, const std::string& name, const GPT2Config& c)
    : Module(parent, name),
      ln_1(this, "ln_1", c.n_embd, c.layer_norm_epsilon, true, c.bias),
      attn(this, "attn", c),
      ln_2(this, "ln_2", c.n_embd, c.layer_norm_epsilon, true, c.bias),
      mlp(this, "mlp", c) {}

Tensor GPT2Block::forward(const Tensor& x, KVCache* cache, size_t layer) {
  nn::ModuleScope scope(*this);
  const Tensor h = x + attn.forward(ln_1(x), cache, layer);
  return h + mlp.forward(ln_2(h));
}

namespace {

// Row b's positions [B, T] after left_padding[b] filler positions (numbered 0 too, unseen),
// and the keys each row attends to, set in the cache for the layers.
Tensor padded_positions(KVCache& cache, int64_t B, int64_t T, Device device) {
  TS_CHECK(static_cast<int64_t>(cache.left_padding.size()) == B, "GPT-2: the cache pads ",
           cache.left_padding.size(), " rows, the batch has ", B);
  const int64_t start = cache.length, keys = start + T;
  std::vector<int64_t> pos(static_cast<size_t>(B * T));
  std::vector<double> attend(static_cast<size_t>(B * keys));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t pad = cache.left_padding[static_cast<size_t>(b)];
    for (int64_t t = 0; t < T; ++t)
      pos[static_cast<size_t>(b * T + t)] = std::max<int64_t>(0, start + t - pad);
    for (int64_t j = 0; j < keys; ++j) attend[static_cast<size_t>(b * keys + j)] = j >= pad;
  }
  cache.attend = from_vector(attend, {B, 1, 1, keys}).to(DType::Bool).to(device);
  return from_vector(pos, {B, T}).to(device);
}

}  // namespace

GPT2Model::GPT2Model(Module* parent, const std::string& name, const GPT2Config& c)
    : Module(parent, name),
      wte(this, "wte", c.vocab_size, c.n_embd),
      wpe(this, "wpe", c.n_positions, c.n_embd),
      drop(this, "drop", c.dropout),
      h(this, "h"),
      ln_f(this, "ln_f", c.n_embd, c.layer_norm_epsilon, true, c.bias),
      config(c) {
  c.validate();
  for (int64_t i = 0; i < c.n_layer; ++i) h.emplace_back<GPT2Block>(c);
}

Tensor GPT2Model::forward(const Tensor& input_ids, KVCache* cache) {
  nn::ModuleScope scope(*this);
  TS_CHECK(input_ids.dim() == 2, "GPT-2: input_ids must be [batch, time], got ",
           input_ids.describe());
  const int64_t T = input_ids.size(1), start = cache ? cache->length : 0;
  const bool padded = cache && !cache->left_padding.empty();
  const int64_t least_padding =
      padded ? *std::min_element(cache->left_padding.begin(), cache->left_padding.end()) : 0;
  TS_CHECK(start + T - least_padding <= config.n_positions, "GPT-2: sequence of ",
           start + T - least_padding,
           " tokens exceeds the model's n_positions = ", config.n_positions);
  const Tensor pos = padded ? padded_positions(*cache, input_ids.size(0), T, input_ids.device())
                            : arange(static_cast<double>(start), static_cast<double>(start + T), 1,
                                     DType::Int64, input_ids.device());
  Tensor x = drop(wte(input_ids) + wpe(pos));
  if (activation_checkpointing && !cache) {
    x = parallel::run_layers(
        activation_checkpointing.get(), static_cast<int64_t>(h.size()),
        [this](int64_t i, const Tensor& in) {
          return h.at<GPT2Block>(static_cast<size_t>(i))
              .forward(in, nullptr, static_cast<size_t>(i));
        },
        x);
    return ln_f(x);
  }
  for (size_t i = 0; i < h.size(); ++i) x = h.at<GPT2Block>(i).forward(x, cache, i);
  if (cache) cache->length += T;
  return ln_f(x);
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& c)
    : transformer(this, "transformer", c), config(c) {
  init_weights();
}

Tensor GPT2LMHeadModel::forward(const Tensor& input_ids, KVCache* cache) {
  nn::ModuleScope scope(*this);
  return linear(transformer.forward(input_ids, cache), transformer.wte.weight);  // tied head
}

Tensor GPT2LMHeadModel::loss(const Batch& b) {
  nn::ModuleScope scope(*this);
  TS_CHECK(b.targets.defined(), "GPT-2 loss: the batch has no targets");
  TS_CHECK(b.targets.shape() == b.input_ids.shape(), "GPT-2 loss: targets ", b.targets.describe(),
           " must match input_ids ", b.input_ids.describe());
  const Tensor lg = forward(b.input_ids);
  const Tensor loss =
      b.target_weight == 0.0
          ? cross_entropy(lg.view({-1, config.vocab_size}), b.targets.reshape({-1}), -100)
          : cross_entropy(lg.view({-1, config.vocab_size}), b.targets.reshape({-1}), -100, 0.0,
                          Reduction::Sum) *
                b.target_weight;
  return loss;
}

std::vector<HFWeight> GPT2LMHeadModel::hf_weights() {
  std::vector<HFWeight> out;
  for (auto& [name, t] : named_parameters()) {
    // HF's Conv1D keeps [in, out]: every Linear inside the blocks is transposed.
    const bool conv1d = name.find(".c_attn.weight") != std::string::npos ||
                        name.find(".c_proj.weight") != std::string::npos ||
                        name.find(".c_fc.weight") != std::string::npos;
    out.push_back({name, name, conv1d});
  }
  return out;
}

bool GPT2LMHeadModel::hf_ignorable(const std::string& key) const {
  auto ends_with = [&](const std::string& s) {
    return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0;
  };
  return key == "lm_head.weight" || ends_with(".attn.bias") || ends_with(".attn.masked_bias");
}

std::unique_ptr<PretrainedModel> GPT2LMHeadModel::hf_export_model() const {
  if (config.bias) return nullptr;
  GPT2Config with_bias = config;
  with_bias.bias = true;
  auto full = std::make_unique<GPT2LMHeadModel>(with_bias);
  NoGradGuard no_grad;
  for (auto& [name, t] : full->named_parameters()) t->zero_();
  return full;
}

void GPT2LMHeadModel::init_weights() {
  NoGradGuard no_grad;
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  for (auto& [name, t] : named_parameters()) {
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (name.find(".ln_") != std::string::npos || name.find("ln_f.") != std::string::npos) {
      t->fill_(is_bias ? 0.0 : 1.0);
    } else if (is_bias) {
      t->zero_();
    } else {
      const bool resid = name.find(".c_proj.weight") != std::string::npos;
      t->copy_(randn(t->shape(), t->dtype(), t->device()) * (resid ? resid_std : 0.02));
    }
  }
}

}  // namespace tessera::models
