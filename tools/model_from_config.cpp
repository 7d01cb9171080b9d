#include "cli.h"
#include "tessera/models/bert.h"
#include "tessera/models/gpt2.h"

namespace tessera::cli {

std::unique_ptr<models::PretrainedModel> model_from_train_config(const io::TrainConfig& cfg,
                                                                 int64_t vocab_size) {
  if (cfg.model.type == "bert")
    return std::make_unique<models::BertForPreTraining>(
        bert_config_from_train_config(cfg, vocab_size), cfg.data.nsp);
  return std::make_unique<models::GPT2LMHeadModel>(gpt2_config_from_train_config(cfg, vocab_size));
}

models::BertConfig bert_config_from_train_config(const io::TrainConfig& cfg, int64_t vocab_size) {
  const auto& m = cfg.model;
  models::BertConfig c = m.size.empty() ? models::BertConfig() : models::BertConfig::named(m.size);
  if (m.size.empty()) {
    c.hidden_size = m.n_embd, c.num_hidden_layers = m.n_layer, c.num_attention_heads = m.n_head;
    c.intermediate_size = m.intermediate_size ? m.intermediate_size : 4 * m.n_embd;
  }
  c.vocab_size = vocab_size;
  c.max_position_embeddings = m.block_size;
  c.hidden_dropout_prob = m.dropout;
  return c;
}

models::GPT2Config gpt2_config_from_train_config(const io::TrainConfig& cfg, int64_t vocab_size) {
  const auto& m = cfg.model;
  models::GPT2Config c = m.size.empty() ? models::GPT2Config() : models::GPT2Config::named(m.size);
  if (m.size.empty()) c.n_embd = m.n_embd, c.n_layer = m.n_layer, c.n_head = m.n_head;
  c.vocab_size = vocab_size;
  c.n_positions = m.block_size;
  c.dropout = m.dropout;
  c.bias = m.bias;
  return c;
}

}  // namespace tessera::cli
