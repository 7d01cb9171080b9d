#include "tessera/models/bert.h"

#include <nlohmann/json.hpp>

#include "config_field.h"

#include "tessera/grad_mode.h"

namespace tessera::models {

using json = nlohmann::json;

BertConfig BertConfig::named(const std::string& name) {
  BertConfig c;
  if (name == "bert-base") return c;
  if (name == "bert-large")
    c.hidden_size = 1024, c.num_hidden_layers = 24, c.num_attention_heads = 16,
    c.intermediate_size = 4096;
  else if (name == "tiny")
    c.vocab_size = 99, c.hidden_size = 32, c.num_hidden_layers = 2, c.num_attention_heads = 4,
    c.intermediate_size = 64, c.max_position_embeddings = 32;
  else
    fail("unknown BERT size '", name, "': expected bert-base, bert-large or tiny");
  return c;
}

BertConfig BertConfig::from_json(const std::string& text) {
  const json j = json::parse(text);
  BertConfig c;
  auto get = [&](const char* key, auto& field) { read_config_field(j, key, field); };
  get("vocab_size", c.vocab_size);
  get("hidden_size", c.hidden_size);
  get("num_hidden_layers", c.num_hidden_layers);
  get("num_attention_heads", c.num_attention_heads);
  get("intermediate_size", c.intermediate_size);
  get("max_position_embeddings", c.max_position_embeddings);
  get("type_vocab_size", c.type_vocab_size);
  get("hidden_dropout_prob", c.hidden_dropout_prob);
  get("layer_norm_eps", c.layer_norm_eps);
  const std::string act = j.value("hidden_act", std::string("gelu"));
  if (act == "gelu")
    c.activation = GeluApprox::None;
  else if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    c.activation = GeluApprox::Tanh;
  else
    fail("BERT config: hidden_act '", act, "' is not supported (gelu or gelu_new)");
  c.validate();
  return c;
}

std::string BertConfig::to_json(const std::string& architecture) const {
  return json{{"model_type", "bert"},
              {"architectures", {architecture}},
              {"vocab_size", vocab_size},
              {"hidden_size", hidden_size},
              {"num_hidden_layers", num_hidden_layers},
              {"num_attention_heads", num_attention_heads},
              {"intermediate_size", intermediate_size},
              {"max_position_embeddings", max_position_embeddings},
              {"type_vocab_size", type_vocab_size},
              {"hidden_dropout_prob", hidden_dropout_prob},
              {"attention_probs_dropout_prob", hidden_dropout_prob},
              {"layer_norm_eps", layer_norm_eps},
              {"hidden_act", activation == GeluApprox::None ? "gelu" : "gelu_new"},
              {"tie_word_embeddings", true}}
      .dump(2);
}

void BertConfig::validate() const {
  TS_CHECK(vocab_size > 0 && hidden_size > 0 && num_hidden_layers > 0 && num_attention_heads > 0 &&
               intermediate_size > 0 && max_position_embeddings > 0 && type_vocab_size > 0,
           "BERT config: sizes must be positive");
  TS_CHECK(hidden_size % num_attention_heads == 0, "BERT config: hidden_size ", hidden_size,
           " is not divisible by num_attention_heads ", num_attention_heads);
}

BertEmbeddings::BertEmbeddings(Module* parent, const std::string& name, const BertConfig& c)
    : Module(parent, name),
      word_embeddings(this, "word_embeddings", c.vocab_size, c.hidden_size),
      position_embeddings(this, "position_embeddings", c.max_position_embeddings, c.hidden_size),
      token_type_embeddings(this, "token_type_embeddings", c.type_vocab_size, c.hidden_size),
      LayerNorm(this, "LayerNorm", c.hidden_size, c.layer_norm_eps),
      dropout(this, "dropout", c.hidden_dropout_prob) {}

Tensor BertEmbeddings::forward(const Tensor& ids, const Tensor& types) {
  nn::ModuleScope scope(*this);
  const int64_t T = ids.size(1);
  TS_CHECK(T <= position_embeddings.weight.size(0), "BERT: sequence of ", T,
           " tokens exceeds max_position_embeddings = ", position_embeddings.weight.size(0));
  const Tensor pos = arange(0, static_cast<double>(T), 1, DType::Int64, ids.device());
  const Tensor tt = types.defined() ? types : zeros(ids.shape(), DType::Int64, ids.device());
  return dropout(
      LayerNorm(word_embeddings(ids) + position_embeddings(pos) + token_type_embeddings(tt)));
}

BertLayer::SelfAttention::SelfAttention(Module* parent, const std::string& name,
                                        const BertConfig& c)
    : Module(parent, name),
      query(this, "query", c.hidden_size, c.hidden_size),
      key(this, "key", c.hidden_size, c.hidden_size),
      value(this, "value", c.hidden_size, c.hidden_size) {}

BertLayer::Output::Output(Module* parent, const std::string& name, int64_t in, const BertConfig& c)
    : Module(parent, name),
      dense(this, "dense", in, c.hidden_size),
      LayerNorm(this, "LayerNorm", c.hidden_size, c.layer_norm_eps),
      dropout(this, "dropout", c.hidden_dropout_prob) {}

Tensor BertLayer::Output::forward(const Tensor& x, const Tensor& residual) {
  nn::ModuleScope scope(*this);
  return LayerNorm(dropout(dense(x)) + residual);
}

BertLayer::Attention::Attention(Module* parent, const std::string& name, const BertConfig& c)
    : Module(parent, name), self(this, "self", c), output(this, "output", c.hidden_size, c) {}

BertLayer::Intermediate::Intermediate(Module* parent, const std::string& name, const BertConfig& c)
    : Module(parent, name), dense(this, "dense", c.hidden_size, c.intermediate_size) {}

BertLayer::BertLayer(Module* parent, const std::string& name, const BertConfig& c)
    : Module(parent, name),
      attention(this, "attention", c),
      intermediate(this, "intermediate", c),
      output(this, "output", c.intermediate_size, c),
      heads(c.num_attention_heads),
      activation(c.activation) {}

Tensor BertLayer::forward(const Tensor& x, const Tensor& mask) {
  nn::ModuleScope scope(*this);
  auto& s = attention.self;
  const Tensor ctx = scaled_dot_product_attention(nn::split_heads(s.query(x), heads),
                                                  nn::split_heads(s.key(x), heads),
                                                  nn::split_heads(s.value(x), heads), mask);
  const Tensor a = attention.output.forward(nn::merge_heads(ctx), x);
  return output.forward(gelu(intermediate.dense(a), activation), a);
}

BertModel::Encoder::Encoder(Module* parent, const std::string& name, const BertConfig& c)
    : Module(parent, name), layer(this, "layer") {
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer.emplace_back<BertLayer>(c);
}

BertModel::BertModel(Module* parent, const std::string& name, const BertConfig& c, bool with_pooler)
    : Module(parent, name),
      embeddings(this, "embeddings", c),
      encoder(this, "encoder", c),
      config(c) {
  c.validate();
  if (with_pooler) {
    pooler = std::make_unique<nn::Module>(this, "pooler");
    pooler_dense =
        std::make_unique<nn::Linear>(pooler.get(), "dense", c.hidden_size, c.hidden_size);
  }
}

Tensor bert_attention_mask(const Batch& b) {
  if (!b.attention_mask.defined()) return {};
  TS_CHECK(b.attention_mask.shape() == b.input_ids.shape(), "BERT: attention_mask ",
           b.attention_mask.describe(), " must match input_ids ", b.input_ids.describe());
  return ne(b.attention_mask, zeros({}, b.attention_mask.dtype(), b.attention_mask.device()))
      .unsqueeze(1)
      .unsqueeze(1);
}

Tensor BertModel::forward(const Batch& b) {
  nn::ModuleScope scope(*this);
  TS_CHECK(b.input_ids.dim() == 2, "BERT: input_ids must be [batch, time], got ",
           b.input_ids.describe());
  const Tensor mask = bert_attention_mask(b);
  return parallel::run_layers(
      activation_checkpointing.get(), static_cast<int64_t>(encoder.layer.size()),
      [this, mask](int64_t i, const Tensor& in) {
        return encoder.layer.at<BertLayer>(static_cast<size_t>(i)).forward(in, mask);
      },
      embeddings.forward(b.input_ids, b.token_type_ids));
}

Tensor BertModel::pool(const Tensor& seq) {
  nn::ModuleScope scope(*this);
  TS_CHECK(pooler_dense, "BERT: this model has no pooler");
  return tanh((*pooler_dense)(seq.select(1, 0)));
}

BertLMPredictionHead::Transform::Transform(Module* parent, const std::string& name,
                                           const BertConfig& c)
    : Module(parent, name),
      dense(this, "dense", c.hidden_size, c.hidden_size),
      LayerNorm(this, "LayerNorm", c.hidden_size, c.layer_norm_eps) {}

BertLMPredictionHead::BertLMPredictionHead(Module* parent, const std::string& name,
                                           const BertConfig& c)
    : Module(parent, name), transform(this, "transform", c), activation(c.activation) {
  register_parameter("bias", &bias, zeros({c.vocab_size}));
}

Tensor BertLMPredictionHead::forward(const Tensor& x, const Tensor& word_embeddings) {
  nn::ModuleScope scope(*this);
  const Tensor h = transform.LayerNorm(gelu(transform.dense(x), activation));
  return linear(h, word_embeddings, bias);
}

BertForPreTraining::Cls::Cls(Module* parent, const std::string& name, const BertConfig& c, bool nsp)
    : Module(parent, name), predictions(this, "predictions", c) {
  if (nsp)
    seq_relationship = std::make_unique<nn::Linear>(this, "seq_relationship", c.hidden_size, 2);
}

BertForPreTraining::BertForPreTraining(const BertConfig& c, bool nsp)
    : bert(this, "bert", c, nsp), cls(this, "cls", c, nsp), config(c), with_nsp(nsp) {
  init_weights();
}

Tensor BertForPreTraining::logits(const Batch& b) {
  return cls.predictions.forward(bert.forward(b), bert.embeddings.word_embeddings.weight);
}

Tensor BertForPreTraining::nsp_logits(const Batch& b) {
  TS_CHECK(with_nsp, "BERT: this model has no next-sentence head");
  return (*cls.seq_relationship)(bert.pool(bert.forward(b)));
}

Tensor BertForPreTraining::loss(const Batch& b) {
  nn::ModuleScope scope(*this);
  TS_CHECK(b.targets.defined(), "BERT loss: the batch has no targets (MLM labels)");
  TS_CHECK(b.targets.shape() == b.input_ids.shape(), "BERT loss: targets ", b.targets.describe(),
           " must match input_ids ", b.input_ids.describe());
  const Tensor seq = bert.forward(b);
  const Tensor lg = cls.predictions.forward(seq, bert.embeddings.word_embeddings.weight);
  // A batch without masked positions (short NSP pairs) adds no MLM loss instead of a NaN mean.
  Tensor loss = b.target_weight == 0.0 && b.loss_terms() > 0
                    ? cross_entropy(lg.view({-1, config.vocab_size}), b.targets.reshape({-1}), -100)
                    : cross_entropy(lg.view({-1, config.vocab_size}), b.targets.reshape({-1}), -100,
                                    0.0, Reduction::Sum) *
                          b.target_weight;
  if (with_nsp && b.next_sentence_label.defined())
    loss = loss + cross_entropy((*cls.seq_relationship)(bert.pool(seq)),
                                b.next_sentence_label.reshape({-1}));
  return loss;
}

std::vector<HFWeight> BertForPreTraining::hf_weights() {
  std::vector<HFWeight> out;
  for (auto& [name, t] : named_parameters()) out.push_back({name, name, false});
  return out;
}

bool BertForPreTraining::hf_ignorable(const std::string& key) const {
  if (key == "bert.embeddings.position_ids" || key == "embeddings.position_ids" ||
      key == "cls.predictions.decoder.weight" || key == "cls.predictions.decoder.bias")
    return true;
  // A masked-LM model loading a pretraining checkpoint leaves its NSP parts unused.
  const bool nsp_part =
      key.rfind("cls.seq_relationship.", 0) == 0 || key.find("pooler.") != std::string::npos;
  return !with_nsp && nsp_part;
}

void BertForPreTraining::init_weights() {
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) {
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (name.find("LayerNorm.") != std::string::npos)
      t->fill_(is_bias ? 0.0 : 1.0);
    else if (is_bias || name == "cls.predictions.bias")
      t->zero_();
    else
      t->copy_(randn(t->shape(), t->dtype(), t->device()) * 0.02);
  }
}

}  // namespace tessera::models
