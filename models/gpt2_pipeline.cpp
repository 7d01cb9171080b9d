#include "tessera/models/gpt2_pipeline.h"

#include "tessera/ops.h"

namespace tessera::models {

using parallel::LayerSpec;
using parallel::PipeLayer;
using parallel::PipeValue;

namespace {

// Token and position embeddings, then dropout: GPT2Model's first lines.
class GPT2EmbeddingPipe : public PipeLayer {
 public:
  GPT2EmbeddingPipe(nn::Module* parent, const std::string& name, const GPT2Config& c)
      : PipeLayer(parent, name),
        wte(this, "wte", c.vocab_size, c.n_embd),
        wpe(this, "wpe", c.n_positions, c.n_embd),
        drop(this, "drop", c.dropout),
        n_positions(c.n_positions) {}
  PipeValue forward(const PipeValue& x) override {
    const Tensor& ids = x.at(0);
    TS_CHECK(ids.dim() == 2, "GPT-2 pipeline: input_ids must be [batch, time], got ",
             ids.describe());
    const int64_t T = ids.size(1);
    TS_CHECK(T <= n_positions, "GPT-2 pipeline: sequence of ", T,
             " tokens exceeds the model's n_positions = ", n_positions);
    const Tensor pos = arange(0, static_cast<double>(T), 1, DType::Int64, ids.device());
    return {drop(wte(ids) + wpe(pos))};
  }
  std::string type_name() const override { return "GPT2Embedding"; }
  nn::Embedding wte, wpe;
  nn::Dropout drop;
  int64_t n_positions;
};

class GPT2BlockPipe : public PipeLayer {
 public:
  GPT2BlockPipe(nn::Module* parent, const std::string& name, const GPT2Config& c)
      : PipeLayer(parent, name), h(this, "h", c) {}
  PipeValue forward(const PipeValue& x) override { return {h.forward(x.at(0), nullptr, 0)}; }
  std::string type_name() const override { return "GPT2Block"; }
  GPT2Block h;
};

class GPT2FinalNormPipe : public PipeLayer {
 public:
  GPT2FinalNormPipe(nn::Module* parent, const std::string& name, const GPT2Config& c)
      : PipeLayer(parent, name), ln_f(this, "ln_f", c.n_embd, c.layer_norm_epsilon, true, c.bias) {}
  PipeValue forward(const PipeValue& x) override { return {ln_f(x.at(0))}; }
  std::string type_name() const override { return "LayerNorm"; }
  nn::LayerNorm ln_f;
};

}  // namespace

std::vector<LayerSpec> gpt2_pipeline_layers(const GPT2Config& c) {
  c.validate();
  std::vector<LayerSpec> specs{
      LayerSpec::tied<GPT2EmbeddingPipe>("embed", {"wte.weight"}, {}, "GPT2Embedding", c)};
  for (int64_t i = 0; i < c.n_layer; ++i)
    specs.push_back(LayerSpec::of<GPT2BlockPipe>("GPT2Block", c));
  specs.push_back(LayerSpec::of<GPT2FinalNormPipe>("LayerNorm", c));
  // The LM head: the token embedding's weight, transposed (GPT2LMHeadModel's tied head).
  auto head = [](PipeLayer& embed, const PipeValue& x) -> PipeValue {
    return {linear(x.at(0), dynamic_cast<GPT2EmbeddingPipe&>(embed).wte.weight)};
  };
  specs.push_back(
      LayerSpec::tied<GPT2EmbeddingPipe>("embed", {"wte.weight"}, head, "GPT2Embedding", c));
  return specs;
}

parallel::PipeLossFn gpt2_pipeline_loss() {
  return [](const PipeValue& logits, const PipeValue& labels) {
    const Tensor& lg = logits.at(0);
    const Tensor& targets = labels.at(0);
    TS_CHECK(lg.dim() == 3 && targets.dim() == 2 && lg.size(0) == targets.size(0) &&
                 lg.size(1) == targets.size(1),
             "GPT-2 pipeline loss: logits ", lg.describe(), " do not match targets ",
             targets.describe());
    return cross_entropy(lg.view({-1, lg.size(2)}), targets.reshape({-1}), -100);
  };
}

std::string gpt2_name_of_pipeline_parameter(const std::string& name, int64_t n_layer) {
  const std::string tied = "tied_modules.embed.";
  if (name.rfind(tied, 0) == 0) return "transformer." + name.substr(tied.size());
  const size_t dot = name.find('.');
  TS_CHECK(dot != std::string::npos && dot > 0 && name.find_first_not_of("0123456789") == dot,
           "GPT-2 pipeline: '", name, "' is not a pipeline parameter name");
  const int64_t layer = std::stoll(name.substr(0, dot));
  const std::string rest = name.substr(dot + 1);
  if (layer >= 1 && layer <= n_layer && rest.rfind("h.", 0) == 0)
    return "transformer.h." + std::to_string(layer - 1) + rest.substr(1);
  if (layer == n_layer + 1 && rest.rfind("ln_f.", 0) == 0) return "transformer." + rest;
  fail("GPT-2 pipeline: '", name, "' is not a parameter of a ", n_layer, "-layer GPT-2 pipeline");
}

}  // namespace tessera::models
