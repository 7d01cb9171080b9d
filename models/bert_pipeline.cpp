#include "tessera/models/bert_pipeline.h"

#include "tessera/ops.h"
#include "tessera/parallel/sequence_parallel.h"
#include "tessera/parallel/vocab_parallel.h"
#include "tessera/rng.h"

namespace tessera::models {

using parallel::LayerSpec;
using parallel::PipeLayer;
using parallel::PipeValue;

namespace {

// An empty mask passed between stages stands for "none" (a value holds defined tensors).
Tensor mask_or_none(const Tensor& m) {
  return m.numel() == 0 ? Tensor() : m;
}

// The embeddings over the context (vocabulary-parallel word embedding; with sequence
// parallelism this rank's chunk of the sequence and of dropout's masks).
class BertEmbeddingsPipe : public PipeLayer {
 public:
  BertEmbeddingsPipe(nn::Module* parent, const std::string& name, const BertConfig& c,
                     const parallel::ParallelContext& ctx)
      : PipeLayer(parent, name), embeddings(this, "embeddings", c, ctx) {}
  PipeValue forward(const PipeValue& x) override {
    TS_CHECK(x.size() == 3 && x[0].dim() == 2,
             "BERT pipeline: expected {input_ids [B, T], "
             "token_type_ids, attention_mask}, got ",
             x.size(), " tensors");
    return {embeddings.forward(x[0], x[1]), x[2]};
  }
  std::string type_name() const override { return "BertEmbeddings"; }
  BertEmbeddings embeddings;
};

class BertLayerPipe : public PipeLayer {
 public:
  BertLayerPipe(nn::Module* parent, const std::string& name, const BertConfig& c,
                const parallel::ParallelContext& ctx, int64_t index)
      : PipeLayer(parent, name),
        layer(this, "layer", c, ctx, index),
        sequence_group(ctx.sequence_group()) {}
  PipeValue forward(const PipeValue& x) override {
    const parallel::SequenceShardScope chunk(sequence_group.get());
    return {layer.forward(x.at(0), mask_or_none(x.at(1))), x.at(1)};
  }
  std::string type_name() const override { return "BertLayer"; }
  BertLayer layer;
  std::shared_ptr<parallel::ProcessGroup> sequence_group;
};

// The masked-LM transform, and the pooler with the next-sentence classifier (with sequence
// parallelism on this rank's chunk, as BertForPreTraining's).
class BertHeadsPipe : public PipeLayer {
 public:
  BertHeadsPipe(nn::Module* parent, const std::string& name, const BertConfig& c, bool with_nsp,
                const parallel::ParallelContext& ctx)
      : PipeLayer(parent, name),
        transform(this, "transform", c, ctx.sequence_group()),
        activation(c.activation),
        sequence_group(ctx.sequence_group()) {
    if (with_nsp) {
      pooler = std::make_unique<nn::Linear>(this, "pooler", c.hidden_size, c.hidden_size);
      seq_relationship = std::make_unique<nn::Linear>(this, "seq_relationship", c.hidden_size, 2);
    }
  }
  PipeValue forward(const PipeValue& x) override {
    const Tensor& seq = x.at(0);
    PipeValue out{bert_mlm_transform(transform, seq, activation, sequence_group.get())};
    if (pooler)
      out.push_back(
          (*seq_relationship)(tanh((*pooler)(bert_first_token(seq, sequence_group.get())))));
    return out;
  }
  std::string type_name() const override { return "BertHeads"; }
  BertLMPredictionHead::Transform transform;
  GeluApprox activation;
  std::unique_ptr<nn::Linear> pooler, seq_relationship;
  std::shared_ptr<parallel::ProcessGroup> sequence_group;
};

// The decoder's bias (tensor parallel: over this rank's vocabulary columns, split as the tied
// embedding).
class BertDecoderBiasPipe : public PipeLayer, public parallel::TensorParallelModule {
 public:
  BertDecoderBiasPipe(nn::Module* parent, const std::string& name, const BertConfig& c,
                      const parallel::ParallelContext& ctx)
      : PipeLayer(parent, name), vocab_size(c.vocab_size), ranks(ctx.tensor_parallel_size()) {
    register_parameter("bias", &bias, zeros({(c.vocab_size + ranks - 1) / ranks}));
  }
  PipeValue forward(const PipeValue& x) override {
    PipeValue out = x;
    out[0] = x.at(0) + bias;
    return out;
  }
  parallel::TensorParallelLayout tensor_parallel_splits() const override {
    if (ranks == 1) return {};
    return {{"bias", {0, 1, vocab_size}}};
  }
  std::string type_name() const override { return "BertDecoderBias"; }
  Tensor bias;
  int64_t vocab_size, ranks;
};

}  // namespace

std::vector<LayerSpec> bert_pipeline_layers(const BertConfig& c, bool with_nsp,
                                            std::shared_ptr<parallel::ProcessGroup> tp,
                                            bool sequence_parallel) {
  const parallel::ParallelContext ctx{std::move(tp), sequence_parallel};
  TS_CHECK(!sequence_parallel || ctx.tensor_group(),
           "BERT pipeline: sequence_parallel needs a tensor-parallel group of 2 or more ranks");
  BertForPreTraining::check_divisible(c, ctx.tensor_parallel_size());
  const std::vector<std::string> tied{"embeddings.word_embeddings.weight"};
  std::vector<LayerSpec> specs{
      LayerSpec::tied<BertEmbeddingsPipe>("embed", tied, {}, "BertEmbeddings", c, ctx)};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    specs.push_back(LayerSpec::of<BertLayerPipe>("BertLayer", c, ctx, i));
  specs.push_back(LayerSpec::of<BertHeadsPipe>("BertHeads", c, with_nsp, ctx));
  // The decoder: the word embedding's weight, transposed (tensor parallel: this rank's
  // vocabulary columns); the NSP logits pass through.
  auto decoder = [sp = ctx.sequence_parallel](PipeLayer& embed, const PipeValue& x) -> PipeValue {
    PipeValue out = x;
    out[0] = parallel::vocab_parallel_logits(
        x.at(0), dynamic_cast<BertEmbeddingsPipe&>(embed).embeddings.word_embeddings, sp);
    return out;
  };
  specs.push_back(
      LayerSpec::tied<BertEmbeddingsPipe>("embed", tied, decoder, "BertEmbeddings", c, ctx));
  specs.push_back(LayerSpec::of<BertDecoderBiasPipe>("BertDecoderBias", c, ctx));
  return specs;
}

parallel::PipeLossFn bert_pipeline_loss(std::shared_ptr<parallel::ProcessGroup> tp) {
  if (tp && tp->size() == 1) tp = nullptr;
  return [tp](const PipeValue& out, const PipeValue& labels) {
    const Tensor& lg = out.at(0);
    const Tensor targets = labels.at(0).reshape({-1});
    const double weight = labels.at(2).item();
    const Tensor flat = lg.view({-1, lg.size(2)});
    // (No masked position: no MLM loss rather than a NaN mean, as BertForPreTraining.)
    Batch counted;
    counted.targets = labels.at(0);
    const double count = counted.loss_terms();
    Tensor loss;
    if (tp) {  // this rank's vocabulary columns; the mean, times count x weight for a sum
      loss = count == 0 ? sum(flat.narrow(1, 0, 1)) * 0.0
                        : parallel::vocab_parallel_cross_entropy(flat, targets, *tp, -100);
      if (weight != 0.0) loss = loss * (count * weight);
    } else {
      loss = weight == 0.0 && count > 0
                 ? cross_entropy(flat, targets, -100)
                 : cross_entropy(flat, targets, -100, 0.0, Reduction::Sum) * weight;
    }
    if (out.size() > 1 && labels.at(1).defined())
      loss = loss + cross_entropy(out[1], labels[1].reshape({-1}));
    return loss;
  };
}

PipeValue bert_pipeline_inputs(const Batch& b) {
  const Tensor types = b.token_type_ids.defined()
                           ? b.token_type_ids
                           : zeros(b.input_ids.shape(), DType::Int64, b.input_ids.device());
  const Tensor mask = bert_attention_mask(b);
  return {b.input_ids, types, mask.defined() ? mask : zeros({0}, DType::Bool)};
}

PipeValue bert_pipeline_labels(const Batch& b, double weight) {
  return {b.targets, b.next_sentence_label, full({1}, weight, DType::Float64)};
}

std::string bert_name_of_pipeline_parameter(const std::string& name, int64_t num_layers) {
  const std::string tied = "tied_modules.embed.";
  if (name.rfind(tied, 0) == 0) return "bert." + name.substr(tied.size());
  const size_t dot = name.find('.');
  TS_CHECK(dot != std::string::npos && dot > 0 && name.find_first_not_of("0123456789") == dot,
           "BERT pipeline: '", name, "' is not a pipeline parameter name");
  const int64_t layer = std::stoll(name.substr(0, dot));
  const std::string rest = name.substr(dot + 1);
  if (layer >= 1 && layer <= num_layers && rest.rfind("layer.", 0) == 0)
    return "bert.encoder.layer." + std::to_string(layer - 1) + rest.substr(5);
  if (layer == num_layers + 1) {
    if (rest.rfind("transform.", 0) == 0) return "cls.predictions." + rest;
    if (rest.rfind("pooler.", 0) == 0) return "bert.pooler.dense." + rest.substr(7);
    if (rest.rfind("seq_relationship.", 0) == 0) return "cls." + rest;
  }
  if (layer == num_layers + 3 && rest == "bias") return "cls.predictions.bias";
  fail("BERT pipeline: '", name, "' is not a parameter of a ", num_layers, "-layer BERT pipeline");
}

}  // namespace tessera::models
