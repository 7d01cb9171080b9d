#include "tessera/models/gpt2_pipeline.h"

#include "tessera/ops.h"
#include "tessera/parallel/sequence_parallel.h"
#include "tessera/parallel/vocab_parallel.h"
#include "tessera/rng.h"

namespace tessera::models {

using parallel::LayerSpec;
using parallel::PipeLayer;
using parallel::PipeValue;

namespace {

// Token and position embeddings, then dropout: GPT2Model's first lines, over the context's
// tensor-parallel group (vocabulary-parallel token embedding) and, with sequence parallelism,
// on this rank's sequence chunk (its dropout mask that chunk of one process's).
class GPT2EmbeddingPipe : public PipeLayer {
 public:
  GPT2EmbeddingPipe(nn::Module* parent, const std::string& name, const GPT2Config& c,
                    const parallel::ParallelContext& ctx)
      : PipeLayer(parent, name),
        wte(this, "wte", c.vocab_size, c.n_embd, ctx.tensor_group(), ctx.sequence_parallel),
        wpe(this, "wpe", c.n_positions, c.n_embd),
        drop(this, "drop", c.dropout),
        sequence_group(ctx.sequence_group()) {}
  PipeValue forward(const PipeValue& x) override {
    return {gpt2_input_embeddings(wte, wpe, drop, x.at(0), sequence_group.get(), "GPT-2 pipeline")};
  }
  std::string type_name() const override { return "GPT2Embedding"; }
  parallel::VocabParallelEmbedding wte;
  nn::Embedding wpe;
  nn::Dropout drop;
  std::shared_ptr<parallel::ProcessGroup> sequence_group;
};

// One of GPT2Model's blocks (with sequence parallelism, its dropout masks this rank's chunk).
class GPT2BlockPipe : public PipeLayer {
 public:
  GPT2BlockPipe(nn::Module* parent, const std::string& name, const GPT2Config& c,
                const parallel::ParallelContext& ctx, int64_t layer)
      : PipeLayer(parent, name),
        h(this, "h", c, ctx, layer),
        sequence_group(ctx.sequence_group()) {}
  PipeValue forward(const PipeValue& x) override {
    const parallel::SequenceShardScope chunk(sequence_group.get());
    return {h.forward(x.at(0))};
  }
  std::string type_name() const override { return "GPT2Block"; }
  GPT2Block h;
  std::shared_ptr<parallel::ProcessGroup> sequence_group;
};

// ln_f (with sequence parallelism over this rank's chunk, its weights' gradients summed).
class GPT2FinalNormPipe : public PipeLayer {
 public:
  GPT2FinalNormPipe(nn::Module* parent, const std::string& name, const GPT2Config& c,
                    const parallel::ParallelContext& ctx)
      : PipeLayer(parent, name),
        ln_f(this, "ln_f", c.n_embd, c.layer_norm_epsilon, true, c.bias, ctx.sequence_group()) {}
  PipeValue forward(const PipeValue& x) override { return {ln_f(x.at(0))}; }
  std::string type_name() const override { return "LayerNorm"; }
  parallel::SequenceParallelLayerNorm ln_f;
};

}  // namespace

std::vector<LayerSpec> gpt2_pipeline_layers(const GPT2Config& c,
                                            std::shared_ptr<parallel::ProcessGroup> tp,
                                            bool sequence_parallel) {
  const parallel::ParallelContext ctx{std::move(tp), sequence_parallel};
  TS_CHECK(!sequence_parallel || ctx.tensor_group(),
           "GPT-2 pipeline: sequence_parallel needs a tensor-parallel group of 2 or more ranks");
  GPT2LMHeadModel::check_divisible(c, ctx.tensor_parallel_size());
  std::vector<LayerSpec> specs{
      LayerSpec::tied<GPT2EmbeddingPipe>("embed", {"wte.weight"}, {}, "GPT2Embedding", c, ctx)};
  for (int64_t i = 0; i < c.n_layer; ++i)
    specs.push_back(LayerSpec::of<GPT2BlockPipe>("GPT2Block", c, ctx, i));
  specs.push_back(LayerSpec::of<GPT2FinalNormPipe>("LayerNorm", c, ctx));
  // The LM head: the tied embedding's weight (tensor parallel: this rank's vocabulary columns,
  // padding -inf; sequence parallel: of the gathered sequence), as GPT2LMHeadModel's.
  auto head = [sp = ctx.sequence_parallel](PipeLayer& embed, const PipeValue& x) -> PipeValue {
    return {
        parallel::vocab_parallel_logits(x.at(0), dynamic_cast<GPT2EmbeddingPipe&>(embed).wte, sp)};
  };
  specs.push_back(
      LayerSpec::tied<GPT2EmbeddingPipe>("embed", {"wte.weight"}, head, "GPT2Embedding", c, ctx));
  return specs;
}

parallel::PipeLossFn gpt2_pipeline_loss(std::shared_ptr<parallel::ProcessGroup> tp) {
  if (tp && tp->size() == 1) tp = nullptr;
  return [tp](const PipeValue& logits, const PipeValue& labels) {
    const Tensor& lg = logits.at(0);
    const Tensor& targets = labels.at(0);
    TS_CHECK(lg.dim() == 3 && targets.dim() == 2 && lg.size(0) == targets.size(0) &&
                 lg.size(1) == targets.size(1),
             "GPT-2 pipeline loss: logits ", lg.describe(), " do not match targets ",
             targets.describe());
    // (Tensor parallel: this rank's vocabulary columns; the ranks reduce the softmax.)
    if (tp)
      return parallel::vocab_parallel_cross_entropy(lg.view({-1, lg.size(2)}),
                                                    targets.reshape({-1}), *tp, -100);
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
