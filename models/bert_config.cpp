// BertConfig: the named sizes and Hugging Face's config.json, both ways.
#include <nlohmann/json.hpp>

#include "config_field.h"

#include "tessera/models/bert.h"

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
  c.sparse_attention = SparseAttention::read(j, "BERT config");
  if (j.contains("tessera_moe")) {
    try {
      c.moe = MoELayout::from_json(j.at("tessera_moe").dump());
    } catch (const json::exception& e) {
      fail("BERT config: 'tessera_moe' is not Tessera's MoE layout: ", e.what());
    }
  }
  c.validate();
  return c;
}

std::string BertConfig::to_json(const std::string& architecture) const {
  json j{{"model_type", "bert"},
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
         {"tie_word_embeddings", true}};
  if (sparse_attention) sparse_attention->write(j);
  if (moe) j["tessera_moe"] = json::parse(moe->to_json());
  return j.dump(2);
}

void BertConfig::validate() const {
  TS_CHECK(vocab_size > 0 && hidden_size > 0 && num_hidden_layers > 0 && num_attention_heads > 0 &&
               intermediate_size > 0 && max_position_embeddings > 0 && type_vocab_size > 0,
           "BERT config: sizes must be positive");
  TS_CHECK(hidden_size % num_attention_heads == 0, "BERT config: hidden_size ", hidden_size,
           " is not divisible by num_attention_heads ", num_attention_heads);
  if (sparse_attention)
    sparse_attention->validate(num_attention_heads, max_position_embeddings,
                               "max_position_embeddings");
  if (moe) moe->validate(num_hidden_layers);
}

}  // namespace tessera::models
