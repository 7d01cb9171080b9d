#include <filesystem>

#include "tessera/io/files.h"
#include "tessera/launch/model_config.h"
#include "tessera/models/bert.h"
#include "tessera/models/gpt2.h"

namespace tessera::launch {

std::string init_from_config_json(const io::TrainConfig& cfg) {
  return io::read_text_file((std::filesystem::path(cfg.model.init_from) / "config.json").string());
}

namespace {

// Pretrained embeddings have a row per id of their own tokenizer: another vocabulary's ids
// would index the wrong rows (or none).
void check_init_from_vocab(const io::TrainConfig& cfg, int64_t model_vocab, int64_t data_vocab) {
  TS_CHECK(model_vocab == data_vocab, "model.init_from: ", cfg.model.init_from,
           "/config.json has vocab_size ", model_vocab, " but the data's ", cfg.data.tokenizer,
           " tokenizer has ", data_vocab,
           " ids; train with the directory's own tokenizer (vocab.json + merges.txt or "
           "tokenizer.json there, data.tokenizer left out)",
           cfg.model.type == "bert" ? " (BERT's WordPiece vocab.txt is not a training "
                                      "tokenizer yet)"
                                    : "");
}

}  // namespace

std::unique_ptr<models::PretrainedModel> model_from_train_config(
    const io::TrainConfig& cfg, int64_t vocab_size, const parallel::ParallelContext& ctx) {
  if (cfg.model.type == "bert")
    return std::make_unique<models::BertForPreTraining>(
        bert_config_from_train_config(cfg, vocab_size), cfg.data.nsp, ctx);
  return std::make_unique<models::GPT2LMHeadModel>(gpt2_config_from_train_config(cfg, vocab_size),
                                                   ctx);
}

models::BertConfig bert_config_from_train_config(const io::TrainConfig& cfg, int64_t vocab_size) {
  const auto& m = cfg.model;
  if (!m.init_from.empty()) {
    models::BertConfig c = models::BertConfig::from_json(init_from_config_json(cfg));
    check_init_from_vocab(cfg, c.vocab_size, vocab_size);
    c.hidden_dropout_prob = m.dropout;
    return c;
  }
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
  if (!m.init_from.empty()) {  // its n_positions may exceed block_size: windows are shorter
    models::GPT2Config c = models::GPT2Config::from_json(init_from_config_json(cfg));
    check_init_from_vocab(cfg, c.vocab_size, vocab_size);
    c.dropout = m.dropout;
    return c;
  }
  models::GPT2Config c = m.size.empty() ? models::GPT2Config() : models::GPT2Config::named(m.size);
  if (m.size.empty()) c.n_embd = m.n_embd, c.n_layer = m.n_layer, c.n_head = m.n_head;
  c.vocab_size = vocab_size;
  c.n_positions = m.block_size;
  c.dropout = m.dropout;
  c.bias = m.bias;
  return c;
}

}  // namespace tessera::launch
