#include "tessera/models/bert_tensor_parallel.h"

#include <iostream>

#include "tessera/parallel/tensor_parallel_layout.h"

namespace tessera::models {

namespace {

using GroupPtr = std::shared_ptr<parallel::ProcessGroup>;

// The config, checked before any layer is built.
const BertConfig& checked(const BertConfig& c, const parallel::ProcessGroup& g) {
  BertTensorParallelForPreTraining::check_divisible(c, g.size());
  return c;
}

}  // namespace

TPBertLayer::SelfAttention::SelfAttention(Module* parent, const std::string& name,
                                          const BertConfig& c, GroupPtr g, bool sp)
    : Module(parent, name),
      query(this, "query", c.hidden_size, c.hidden_size, g, /*gather_output=*/false, true, sp),
      key(this, "key", c.hidden_size, c.hidden_size, g, /*gather_output=*/false, true, sp),
      value(this, "value", c.hidden_size, c.hidden_size, g, /*gather_output=*/false, true, sp) {}

TPBertLayer::Output::Output(Module* parent, const std::string& name, int64_t in,
                            const BertConfig& c, GroupPtr g, bool sp)
    : Module(parent, name),
      dense(this, "dense", in, c.hidden_size, g, /*input_is_parallel=*/true, true, sp),
      LayerNorm(this, "LayerNorm", c.hidden_size, c.layer_norm_eps, true, true, sp ? g : nullptr),
      dropout(this, "dropout", c.hidden_dropout_prob) {}

Tensor TPBertLayer::Output::forward(const Tensor& x, const Tensor& residual) {
  nn::ModuleScope scope(*this);
  return LayerNorm(dropout(dense(x)) + residual);  // dropout on the all-reduced (whole) output
}

TPBertLayer::Attention::Attention(Module* parent, const std::string& name, const BertConfig& c,
                                  GroupPtr g, bool sp)
    : Module(parent, name),
      self(this, "self", c, g, sp),
      output(this, "output", c.hidden_size, c, g, sp) {}

TPBertLayer::Intermediate::Intermediate(Module* parent, const std::string& name,
                                        const BertConfig& c, GroupPtr g, bool sp)
    : Module(parent, name),
      dense(this, "dense", c.hidden_size, c.intermediate_size, g, /*gather_output=*/false, true,
            sp) {}

TPBertLayer::TPBertLayer(Module* parent, const std::string& name, const BertConfig& c, GroupPtr g,
                         bool sp)
    : Module(parent, name),
      attention(this, "attention", c, g, sp),
      intermediate(this, "intermediate", c, g, sp),
      output(this, "output", c.intermediate_size, c, g, sp),
      local_heads(c.num_attention_heads / g->size()),
      activation(c.activation) {}

Tensor TPBertLayer::forward(const Tensor& x, const Tensor& mask) {
  nn::ModuleScope scope(*this);
  auto& s = attention.self;
  const Tensor ctx = scaled_dot_product_attention(nn::split_heads(s.query(x), local_heads),
                                                  nn::split_heads(s.key(x), local_heads),
                                                  nn::split_heads(s.value(x), local_heads), mask);
  const Tensor a = attention.output.forward(nn::merge_heads(ctx), x);
  return output.forward(gelu(intermediate.dense(a), activation), a);
}

BertTensorParallelForPreTraining::Embeddings::Embeddings(Module* parent, const std::string& name,
                                                         const BertConfig& c, GroupPtr g, bool sp)
    : Module(parent, name),
      word_embeddings(this, "word_embeddings", c.vocab_size, c.hidden_size, g, sp),
      position_embeddings(this, "position_embeddings", c.max_position_embeddings, c.hidden_size),
      token_type_embeddings(this, "token_type_embeddings", c.type_vocab_size, c.hidden_size),
      LayerNorm(this, "LayerNorm", c.hidden_size, c.layer_norm_eps, true, true, sp ? g : nullptr),
      dropout(this, "dropout", c.hidden_dropout_prob),
      sequence_group(sp ? g : nullptr) {}

Tensor BertTensorParallelForPreTraining::Embeddings::forward(const Tensor& ids,
                                                             const Tensor& types) {
  const int64_t T = ids.size(1), max_positions = position_embeddings.weight.size(0);
  TS_CHECK(T <= max_positions, "BERT: sequence of ", T,
           " tokens exceeds max_position_embeddings = ", max_positions);
  const parallel::ProcessGroup* seq = sequence_group.get();
  const Tensor pos = parallel::sequence_parallel_positions(T, seq, ids.device(), "BERT");
  SequenceShardGuard chunk(seq ? seq->rank() : 0, seq ? seq->size() : 1);
  const int64_t t = pos.size(0), start = seq ? seq->rank() * t : 0;
  auto lookup = [&](nn::Embedding& table, const Tensor& rows) {
    return seq ? embedding(parallel::sequence_parallel_weight(table.weight, *sequence_group), rows)
               : table(rows);
  };
  return dropout(LayerNorm(word_embeddings(ids) + lookup(position_embeddings, pos) +
                           lookup(token_type_embeddings, types.narrow(1, start, t))));
}

BertTensorParallelForPreTraining::Bert::Encoder::Encoder(Module* parent, const std::string& name,
                                                         const BertConfig& c, GroupPtr g, bool sp)
    : Module(parent, name), layer(this, "layer") {
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer.emplace_back<TPBertLayer>(c, g, sp);
}

BertTensorParallelForPreTraining::Bert::Bert(Module* parent, const std::string& name,
                                             const BertConfig& c, bool with_pooler, GroupPtr g,
                                             bool sp)
    : Module(parent, name),
      embeddings(this, "embeddings", c, g, sp),
      encoder(this, "encoder", c, g, sp) {
  if (with_pooler) {
    pooler = std::make_unique<nn::Module>(this, "pooler");
    pooler_dense =
        std::make_unique<nn::Linear>(pooler.get(), "dense", c.hidden_size, c.hidden_size);
  }
}

BertTensorParallelForPreTraining::Cls::Predictions::Predictions(
    Module* parent, const std::string& name, const BertConfig& c,
    const parallel::VocabParallelEmbedding& embedding, GroupPtr sequence_group)
    : Module(parent, name),
      transform(this, "transform", c, std::move(sequence_group)),
      vocab_size(c.vocab_size) {
  register_parameter("bias", &bias, zeros({embedding.vocab_per_rank}));
}

parallel::TensorParallelLayout
BertTensorParallelForPreTraining::Cls::Predictions::tensor_parallel_splits() const {
  return {{"bias", {0, 1, vocab_size}}};
}

BertTensorParallelForPreTraining::Cls::Predictions::Transform::Transform(Module* parent,
                                                                         const std::string& name,
                                                                         const BertConfig& c,
                                                                         GroupPtr sequence_group)
    : Module(parent, name),
      dense(this, "dense", c.hidden_size, c.hidden_size),
      LayerNorm(this, "LayerNorm", c.hidden_size, c.layer_norm_eps, true, true,
                std::move(sequence_group)) {}

BertTensorParallelForPreTraining::Cls::Cls(Module* parent, const std::string& name,
                                           const BertConfig& c, bool nsp,
                                           const parallel::VocabParallelEmbedding& embedding,
                                           GroupPtr sequence_group)
    : Module(parent, name), predictions(this, "predictions", c, embedding, sequence_group) {
  if (nsp)
    seq_relationship = std::make_unique<nn::Linear>(this, "seq_relationship", c.hidden_size, 2);
}

BertTensorParallelForPreTraining::BertTensorParallelForPreTraining(const BertConfig& c,
                                                                   bool with_nsp, GroupPtr group,
                                                                   bool sequence_parallel)
    : BertTensorParallelForPreTraining(c, with_nsp, std::move(group), sequence_parallel,
                                       default_generator().state()) {}

BertTensorParallelForPreTraining::BertTensorParallelForPreTraining(const BertConfig& c, bool nsp,
                                                                   GroupPtr group, bool sp,
                                                                   GeneratorState start)
    : bert(this, "bert", checked(c, *group), nsp, group, sp),
      cls(this, "cls", c, nsp, bert.embeddings.word_embeddings, sp ? group : nullptr),
      config(c),
      with_nsp(nsp),
      sequence_parallel(sp),
      group_(std::move(group)) {
  const int64_t padded = bert.embeddings.word_embeddings.padded_embeddings;
  if (padded != c.vocab_size && group_->rank() == 0)
    std::cerr << "BERT tensor parallel: vocab_size " << c.vocab_size << " padded to " << padded
              << " (a multiple of " << group_->size()
              << " ranks); the padding rows are left out of the loss\n";
  // The whole model's initialisation from the generator as it was (as BertForPreTraining(c)
  // would draw it), sharded; the generator is left where that model leaves it.
  default_generator().set_state(start);
  BertForPreTraining whole(c, nsp);
  load_from_whole(whole);
}

Tensor BertTensorParallelForPreTraining::encode(const Batch& b) {
  nn::ModuleScope scope(*this);
  TS_CHECK(b.input_ids.dim() == 2, "BERT: input_ids must be [batch, time], got ",
           b.input_ids.describe());
  const Tensor mask = bert_attention_mask(b);
  const Tensor& ids = b.input_ids;
  const Tensor types = b.token_type_ids.defined() ? b.token_type_ids
                                                  : zeros(ids.shape(), DType::Int64, ids.device());
  // With sequence parallelism the layers' dropout masks are this rank's chunk too.
  const parallel::ProcessGroup* seq = bert.embeddings.sequence_group.get();
  SequenceShardGuard chunk(seq ? seq->rank() : 0, seq ? seq->size() : 1);
  const Tensor x = bert.embeddings.forward(ids, types);
  return parallel::run_layers(
      activation_checkpointing.get(), static_cast<int64_t>(bert.encoder.layer.size()),
      [this, mask](int64_t i, const Tensor& in) {
        return bert.encoder.layer.at<TPBertLayer>(static_cast<size_t>(i)).forward(in, mask);
      },
      x, /*partition=*/!sequence_parallel);
}

Tensor BertTensorParallelForPreTraining::mlm_logits(const Tensor& seq) {
  auto& p = cls.predictions;
  auto& dense = p.transform.dense;
  const Tensor d = sequence_parallel
                       ? linear(seq, parallel::sequence_parallel_weight(dense.weight, *group_),
                                parallel::sequence_parallel_weight(dense.bias, *group_))
                       : dense(seq);
  const Tensor h = p.transform.LayerNorm(gelu(d, config.activation));
  return parallel::vocab_parallel_logits(h, bert.embeddings.word_embeddings, sequence_parallel) +
         p.bias;
}

Tensor BertTensorParallelForPreTraining::local_logits(const Batch& b) {
  nn::ModuleScope scope(*this);
  return mlm_logits(encode(b));
}

Tensor BertTensorParallelForPreTraining::loss(const Batch& b) {
  nn::ModuleScope scope(*this);
  TS_CHECK(b.targets.defined(), "BERT loss: the batch has no targets (MLM labels)");
  TS_CHECK(b.targets.shape() == b.input_ids.shape(), "BERT loss: targets ", b.targets.describe(),
           " must match input_ids ", b.input_ids.describe());
  const Tensor seq = encode(b);
  const Tensor lg = mlm_logits(seq);
  const int64_t per = bert.embeddings.word_embeddings.vocab_per_rank;
  const Tensor mean = parallel::vocab_parallel_cross_entropy(
      lg.view({-1, per}), b.targets.reshape({-1}), *group_, -100);
  Tensor loss = mean;
  if (b.target_weight != 0.0) {
    const double count = b.loss_terms();
    loss = count == 0 ? mean * 0.0 : mean * (count * b.target_weight);
  }
  if (with_nsp && b.next_sentence_label.defined()) {
    // The first token, which rank 0 holds under sequence parallelism: each rank's first token
    // gathered (not the whole sequence), and every rank's identical pooler gradient taken back
    // as its own token's.
    const Tensor first = sequence_parallel ? parallel::gather_from_sequence_parallel_region(
                                                 seq.narrow(1, 0, 1), *group_, 1, false)
                                           : seq;
    const Tensor pooled = tanh((*bert.pooler_dense)(first.select(1, 0)));
    loss =
        loss + cross_entropy((*cls.seq_relationship)(pooled), b.next_sentence_label.reshape({-1}));
  }
  return loss;
}

void BertTensorParallelForPreTraining::load_from_whole(BertForPreTraining& whole) {
  TS_CHECK(whole.config.to_json("") == config.to_json("") && whole.with_nsp == with_nsp,
           "BERT tensor parallel: load_from_whole needs a model of the same config and heads");
  parallel::load_whole_state(*this, whole.state_dict(), group_->rank(), group_->size());
}

void BertTensorParallelForPreTraining::check_divisible(const BertConfig& c, int64_t n) {
  c.validate();
  TS_CHECK(c.num_attention_heads % n == 0, "BERT tensor parallel: num_attention_heads ",
           c.num_attention_heads, " does not divide among ", n,
           " ranks (each rank holds whole heads)");
  TS_CHECK(c.intermediate_size % n == 0, "BERT tensor parallel: intermediate_size ",
           c.intermediate_size, " does not divide among ", n, " ranks");
}

parallel::TensorParallelLayout BertTensorParallelForPreTraining::layout(const BertConfig& c) {
  parallel::TensorParallelLayout out{
      {"bert.embeddings.word_embeddings.weight", {0, 1, c.vocab_size}},
      {"cls.predictions.bias", {0, 1, c.vocab_size}}};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = "bert.encoder.layer." + std::to_string(i) + ".";
    for (const char* qkv : {"query", "key", "value"})
      for (const char* p : {".weight", ".bias"})
        out[l + "attention.self." + qkv + p] = {0, 1, c.hidden_size};
    out[l + "attention.output.dense.weight"] = {1, 1, c.hidden_size};
    out[l + "intermediate.dense.weight"] = {0, 1, c.intermediate_size};
    out[l + "intermediate.dense.bias"] = {0, 1, c.intermediate_size};
    out[l + "output.dense.weight"] = {1, 1, c.intermediate_size};
  }
  return out;
}

}  // namespace tessera::models
