// BERT's registry entry (models/model_registry.h): "model.type": "bert", pretraining with the
// masked-LM head (and the next-sentence head with data.nsp).
#include <nlohmann/json.hpp>

#include "tessera/models/bert.h"
#include "tessera/models/bert_pipeline.h"
#include "tessera/models/model_registry.h"
#include "tessera/models/moe_config.h"
#include "tessera/models/sparse_attention.h"
#include "tessera/models/transformer_kernel.h"

namespace tessera::models {

namespace {

// The BERT of the config's model section (or model.init_from's config.json).
BertConfig bert_config(const io::TrainConfig& cfg, int64_t vocab_size) {
  const auto& m = cfg.model;
  if (!m.init_from.empty()) {
    BertConfig c = BertConfig::from_json(init_from_config_json(cfg));
    check_init_from_vocab(cfg, c.vocab_size, vocab_size);
    c.hidden_dropout_prob = m.dropout;
    return with_transformer_kernel(with_sparse_attention(c, cfg), cfg);
  }
  BertConfig c = m.size.empty() ? BertConfig() : BertConfig::named(m.size);
  if (m.size.empty()) {
    c.hidden_size = m.n_embd, c.num_hidden_layers = m.n_layer, c.num_attention_heads = m.n_head;
    c.intermediate_size = m.intermediate_size ? m.intermediate_size : 4 * m.n_embd;
  }
  c.vocab_size = vocab_size;
  c.max_position_embeddings = m.block_size;
  c.hidden_dropout_prob = m.dropout;
  c.moe = moe_of(cfg);
  return with_transformer_kernel(with_sparse_attention(c, cfg), cfg);
}

PipelineDefinition bert_pipeline(const io::TrainConfig& cfg, int64_t vocab,
                                 const parallel::ParallelContext& ctx) {
  const BertConfig c = bert_config(cfg, vocab);
  PipelineDefinition p;
  p.layers = bert_pipeline_layers(c, cfg.data.nsp, ctx.tensor_group(), ctx.sequence_parallel);
  p.loss = bert_pipeline_loss(ctx.tensor_group());
  p.whole_name = [n = c.num_hidden_layers](const std::string& name) {
    return bert_name_of_pipeline_parameter(name, n);
  };
  p.checkpointable_layer = "BertLayer";
  p.inputs = bert_pipeline_inputs;
  p.labels = bert_pipeline_labels;
  return p;
}

// BertForPreTraining (with the next-sentence head) when config.json's architectures say so.
std::unique_ptr<PretrainedModel> bert_from_config_json(const std::string& text,
                                                       const std::string& source,
                                                       const parallel::ParallelContext& ctx) {
  const nlohmann::json j = nlohmann::json::parse(text);
  bool nsp = false;
  for (const auto& a : j.value("architectures", nlohmann::json::array())) {
    TS_CHECK(a.is_string(), "'", source, "': 'architectures' holds ", a.dump(),
             ", expected class names");
    nsp = nsp || a.get<std::string>() == "BertForPreTraining";
  }
  return std::make_unique<BertForPreTraining>(BertConfig::from_json(text), nsp, ctx);
}

}  // namespace

ModelEntry bert_model_entry() {
  ModelEntry e;
  e.type = "bert";
  e.doc = "BERT pretraining: masked LM, next-sentence head with data.nsp (BertForPreTraining)";
  e.objective = Objective::masked_lm;
  e.section_keys = {"size",   "n_layer",           "n_head",
                    "n_embd", "intermediate_size", "transformer_kernel"};
  e.build = [](const io::TrainConfig& cfg, int64_t vocab, const parallel::ParallelContext& ctx) {
    return std::make_unique<BertForPreTraining>(bert_config(cfg, vocab), cfg.data.nsp, ctx);
  };
  e.from_config_json = bert_from_config_json;
  e.pipeline = bert_pipeline;
  e.activation_bytes = [](const io::TrainConfig& cfg, int64_t vocab, const ActivationPlan& p) {
    return bert_activation_bytes(bert_config(cfg, vocab), cfg.data.nsp, p).total();
  };
  e.stage_activation_bytes = [](const io::TrainConfig& cfg, int64_t vocab, const ActivationPlan& p,
                                int64_t first, int64_t last) {
    return bert_pipeline_stage_bytes(bert_config(cfg, vocab), cfg.data.nsp, p, first, last);
  };
  return e;
}

}  // namespace tessera::models
