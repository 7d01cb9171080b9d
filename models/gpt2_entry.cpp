// GPT-2's registry entry (models/model_registry.h): "model.type": "gpt2".
#include "tessera/models/gpt2.h"
#include "tessera/models/gpt2_pipeline.h"
#include "tessera/models/model_registry.h"
#include "tessera/models/moe_config.h"
#include "tessera/models/sparse_attention.h"
#include "tessera/models/transformer_kernel.h"

namespace tessera::models {

namespace {

// The GPT-2 of the config's model section (or model.init_from's config.json).
GPT2Config gpt2_config(const io::TrainConfig& cfg, int64_t vocab_size) {
  const auto& m = cfg.model;
  if (!m.init_from.empty()) {  // its n_positions may exceed block_size: windows are shorter
    GPT2Config c = GPT2Config::from_json(init_from_config_json(cfg));
    check_init_from_vocab(cfg, c.vocab_size, vocab_size);
    c.dropout = m.dropout;
    return with_transformer_kernel(with_sparse_attention(c, cfg), cfg);
  }
  GPT2Config c = m.size.empty() ? GPT2Config() : GPT2Config::named(m.size);
  if (m.size.empty()) c.n_embd = m.n_embd, c.n_layer = m.n_layer, c.n_head = m.n_head;
  c.vocab_size = vocab_size;
  c.n_positions = m.block_size;
  c.dropout = m.dropout;
  c.bias = m.bias;
  c.moe = moe_of(cfg);
  return with_transformer_kernel(with_sparse_attention(c, cfg), cfg);
}

PipelineDefinition gpt2_pipeline(const io::TrainConfig& cfg, int64_t vocab,
                                 const parallel::ParallelContext& ctx) {
  const GPT2Config c = gpt2_config(cfg, vocab);
  PipelineDefinition p;
  p.layers = gpt2_pipeline_layers(c, ctx.tensor_group(), ctx.sequence_parallel);
  p.loss = gpt2_pipeline_loss(ctx.tensor_group());
  p.whole_name = [n = c.n_layer](const std::string& name) {
    return gpt2_name_of_pipeline_parameter(name, n);
  };
  p.checkpointable_layer = "GPT2Block";
  return p;
}

}  // namespace

ModelEntry gpt2_model_entry() {
  ModelEntry e;
  e.type = "gpt2";
  e.doc = "GPT-2 causal language model (Hugging Face's GPT2LMHeadModel)";
  e.objective = Objective::causal_lm;
  e.section_keys = {"size", "n_layer", "n_head", "n_embd", "bias", "transformer_kernel"};
  e.build = [](const io::TrainConfig& cfg, int64_t vocab, const parallel::ParallelContext& ctx) {
    return std::make_unique<GPT2LMHeadModel>(gpt2_config(cfg, vocab), ctx);
  };
  e.from_config_json = [](const std::string& text, const std::string&,
                          const parallel::ParallelContext& ctx) {
    return std::make_unique<GPT2LMHeadModel>(GPT2Config::from_json(text), ctx);
  };
  e.pipeline = gpt2_pipeline;
  e.activation_bytes = [](const io::TrainConfig& cfg, int64_t vocab, const ActivationPlan& p) {
    return gpt2_activation_bytes(gpt2_config(cfg, vocab), p).total();
  };
  e.stage_activation_bytes = [](const io::TrainConfig& cfg, int64_t vocab, const ActivationPlan& p,
                                int64_t first, int64_t last) {
    return gpt2_pipeline_stage_bytes(gpt2_config(cfg, vocab), p, first, last);
  };
  return e;
}

}  // namespace tessera::models
