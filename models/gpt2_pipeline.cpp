#include "tessera/models/gpt2_pipeline.h"

#include "tessera/models/gpt2_tensor_parallel.h"
#include "tessera/ops.h"
#include "tessera/parallel/sequence_parallel.h"
#include "tessera/parallel/vocab_parallel.h"
#include "tessera/rng.h"

namespace tessera::models {

using parallel::LayerSpec;
using parallel::PipeLayer;
using parallel::PipeValue;

namespace {

using GroupPtr = std::shared_ptr<parallel::ProcessGroup>;

// The group a layer's activations are split over along the sequence (Megatron-SP), or none.
GroupPtr sequence_group_of() {
  return nullptr;
}
GroupPtr sequence_group_of(const GroupPtr& group, bool sequence_parallel) {
  return sequence_parallel ? group : nullptr;
}

// Token and position embeddings, then dropout: GPT2Model's first lines. The token embedding
// is nn::Embedding, or with tensor parallelism (3D) parallel::VocabParallelEmbedding over the
// group given after the config (and with sequence parallelism, this rank's sequence chunk of
// the sum, its dropout mask that chunk of one process's).
template <class TokenEmbedding>
class GPT2EmbeddingPipe : public PipeLayer {
 public:
  template <class... Group>
  GPT2EmbeddingPipe(nn::Module* parent, const std::string& name, const GPT2Config& c,
                    Group... group)
      : PipeLayer(parent, name),
        wte(this, "wte", c.vocab_size, c.n_embd, group...),
        wpe(this, "wpe", c.n_positions, c.n_embd),
        drop(this, "drop", c.dropout),
        sequence_group(sequence_group_of(group...)) {}
  PipeValue forward(const PipeValue& x) override {
    return {gpt2_input_embeddings(wte, wpe, drop, x.at(0), sequence_group.get(), "GPT-2 pipeline")};
  }
  std::string type_name() const override { return "GPT2Embedding"; }
  TokenEmbedding wte;
  nn::Embedding wpe;
  nn::Dropout drop;
  GroupPtr sequence_group;
};

using GPT2WholeEmbeddingPipe = GPT2EmbeddingPipe<nn::Embedding>;
using GPT2TPEmbeddingPipe = GPT2EmbeddingPipe<parallel::VocabParallelEmbedding>;

class GPT2BlockPipe : public PipeLayer {
 public:
  GPT2BlockPipe(nn::Module* parent, const std::string& name, const GPT2Config& c)
      : PipeLayer(parent, name), h(this, "h", c) {}
  PipeValue forward(const PipeValue& x) override { return {h.forward(x.at(0), nullptr, 0)}; }
  std::string type_name() const override { return "GPT2Block"; }
  GPT2Block h;
};

// ln_f (with sequence parallelism over this rank's chunk, its weights' gradients summed).
class GPT2FinalNormPipe : public PipeLayer {
 public:
  GPT2FinalNormPipe(nn::Module* parent, const std::string& name, const GPT2Config& c,
                    GroupPtr sequence_group = nullptr)
      : PipeLayer(parent, name),
        ln_f(this, "ln_f", c.n_embd, c.layer_norm_epsilon, true, c.bias,
             std::move(sequence_group)) {}
  PipeValue forward(const PipeValue& x) override { return {ln_f(x.at(0))}; }
  std::string type_name() const override { return "LayerNorm"; }
  parallel::SequenceParallelLayerNorm ln_f;
};

// The tensor-parallel layers (3D): the same ops over `group`, each rank holding its shard.
class GPT2TPBlockPipe : public PipeLayer {
 public:
  GPT2TPBlockPipe(nn::Module* parent, const std::string& name, const GPT2Config& c, GroupPtr group,
                  bool sequence_parallel)
      : PipeLayer(parent, name),
        h(this, "h", c, group, sequence_parallel),
        sequence_group(sequence_group_of(group, sequence_parallel)) {}
  PipeValue forward(const PipeValue& x) override {
    const parallel::ProcessGroup* seq = sequence_group.get();
    SequenceShardGuard chunk(seq ? seq->rank() : 0, seq ? seq->size() : 1);
    return {h.forward(x.at(0))};
  }
  std::string type_name() const override { return "GPT2Block"; }
  TPGPT2Block h;
  GroupPtr sequence_group;
};

std::vector<LayerSpec> gpt2_tensor_parallel_layers(const GPT2Config& c, GroupPtr tp, bool sp) {
  GPT2TensorParallelLMHeadModel::check_divisible(c, tp->size());
  std::vector<LayerSpec> specs{LayerSpec::tied<GPT2TPEmbeddingPipe>("embed", {"wte.weight"}, {},
                                                                    "GPT2Embedding", c, tp, sp)};
  for (int64_t i = 0; i < c.n_layer; ++i)
    specs.push_back(LayerSpec::of<GPT2TPBlockPipe>("GPT2Block", c, tp, sp));
  specs.push_back(LayerSpec::of<GPT2FinalNormPipe>("LayerNorm", c, sp ? tp : nullptr));
  // The LM head: this rank's vocabulary columns of the tied embedding (padding: -inf), with
  // sequence parallelism of the gathered sequence.
  auto head = [sp](PipeLayer& embed, const PipeValue& x) -> PipeValue {
    return {parallel::vocab_parallel_logits(x.at(0), dynamic_cast<GPT2TPEmbeddingPipe&>(embed).wte,
                                            sp)};
  };
  specs.push_back(LayerSpec::tied<GPT2TPEmbeddingPipe>("embed", {"wte.weight"}, head,
                                                       "GPT2Embedding", c, tp, sp));
  return specs;
}

}  // namespace

std::vector<LayerSpec> gpt2_pipeline_layers(const GPT2Config& c,
                                            std::shared_ptr<parallel::ProcessGroup> tp,
                                            bool sequence_parallel) {
  c.validate();
  TS_CHECK(!sequence_parallel || (tp && tp->size() > 1),
           "GPT-2 pipeline: sequence_parallel needs a tensor-parallel group of 2 or more ranks");
  if (tp && tp->size() > 1) return gpt2_tensor_parallel_layers(c, std::move(tp), sequence_parallel);
  std::vector<LayerSpec> specs{
      LayerSpec::tied<GPT2WholeEmbeddingPipe>("embed", {"wte.weight"}, {}, "GPT2Embedding", c)};
  for (int64_t i = 0; i < c.n_layer; ++i)
    specs.push_back(LayerSpec::of<GPT2BlockPipe>("GPT2Block", c));
  specs.push_back(LayerSpec::of<GPT2FinalNormPipe>("LayerNorm", c));
  // The LM head: the token embedding's weight, transposed (GPT2LMHeadModel's tied head).
  auto head = [](PipeLayer& embed, const PipeValue& x) -> PipeValue {
    return {linear(x.at(0), dynamic_cast<GPT2WholeEmbeddingPipe&>(embed).wte.weight)};
  };
  specs.push_back(
      LayerSpec::tied<GPT2WholeEmbeddingPipe>("embed", {"wte.weight"}, head, "GPT2Embedding", c));
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
