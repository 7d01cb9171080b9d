// GPT2Config: the named sizes and Hugging Face's config.json, both ways.
#include <nlohmann/json.hpp>

#include "config_field.h"

#include "tessera/models/gpt2.h"
#include "tessera/models/sparse_attention.h"

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
  c.sparse_attention = SparseAttention::read(j, "GPT-2 config");
  if (j.contains("tessera_moe")) {
    try {
      c.moe = MoELayout::from_json(j.at("tessera_moe").dump());
    } catch (const json::exception& e) {
      fail("GPT-2 config: 'tessera_moe' is not Tessera's MoE layout: ", e.what());
    }
  }
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
  if (sparse_attention) sparse_attention->write(j);
  if (moe) j["tessera_moe"] = json::parse(moe->to_json());
  return j.dump(2);
}

void GPT2Config::validate() const {
  TS_CHECK(vocab_size > 0 && n_positions > 0 && n_embd > 0 && n_layer > 0 && n_head > 0,
           "GPT-2 config: sizes must be positive (vocab_size ", vocab_size, ", n_positions ",
           n_positions, ", n_embd ", n_embd, ", n_layer ", n_layer, ", n_head ", n_head, ")");
  TS_CHECK(n_embd % n_head == 0, "GPT-2 config: n_embd ", n_embd, " is not divisible by n_head ",
           n_head);
  TS_CHECK(dropout >= 0 && dropout < 1, "GPT-2 config: dropout must be in [0, 1), got ", dropout);
  if (sparse_attention) sparse_attention->validate(n_head, n_positions, "n_positions");
  if (moe) moe->validate(n_layer);
}

}  // namespace tessera::models
