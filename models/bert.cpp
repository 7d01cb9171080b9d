#include "tessera/models/bert.h"

#include <iostream>

#include "tessera/grad_mode.h"
#include "tessera/parallel/tensor_parallel_layout.h"

namespace tessera::models {

namespace {

// The config, checked before any layer is built.
const BertConfig& checked(const BertConfig& c, const parallel::ParallelContext& ctx) {
  BertForPreTraining::check_divisible(c, ctx.tensor_parallel_size());
  return c;
}

}  // namespace

BertEmbeddings::BertEmbeddings(Module* parent, const std::string& name, const BertConfig& c,
                               const parallel::ParallelContext& ctx)
    : Module(parent, name),
      word_embeddings(this, "word_embeddings", c.vocab_size, c.hidden_size, ctx.tensor_group(),
                      ctx.sequence_parallel),
      position_embeddings(this, "position_embeddings", c.max_position_embeddings, c.hidden_size),
      token_type_embeddings(this, "token_type_embeddings", c.type_vocab_size, c.hidden_size),
      LayerNorm(this, "LayerNorm", c.hidden_size, c.layer_norm_eps, true, true,
                ctx.sequence_group()),
      dropout(this, "dropout", c.hidden_dropout_prob),
      sequence_group(ctx.sequence_group()) {}

Tensor BertEmbeddings::forward(const Tensor& ids, const Tensor& types) {
  nn::ModuleScope scope(*this);
  const int64_t T = ids.size(1);
  TS_CHECK(T <= position_embeddings.weight.size(0), "BERT: sequence of ", T,
           " tokens exceeds max_position_embeddings = ", position_embeddings.weight.size(0));
  const Tensor tt = types.defined() ? types : zeros(ids.shape(), DType::Int64, ids.device());
  if (!sequence_group) {
    const Tensor pos = arange(0, static_cast<double>(T), 1, DType::Int64, ids.device());
    return dropout(
        LayerNorm(word_embeddings(ids) + position_embeddings(pos) + token_type_embeddings(tt)));
  }
  // This rank's chunk: its positions and token types; the replicated tables' gradients summed.
  parallel::ProcessGroup& seq = *sequence_group;
  const Tensor pos = parallel::sequence_parallel_positions(T, &seq, ids.device(), "BERT");
  SequenceShardGuard chunk(seq.rank(), seq.size());
  const int64_t t = pos.size(0), start = seq.rank() * t;
  auto lookup = [&](nn::Embedding& table, const Tensor& rows) {
    return embedding(parallel::sequence_parallel_weight(table.weight, seq), rows);
  };
  return dropout(LayerNorm(word_embeddings(ids) + lookup(position_embeddings, pos) +
                           lookup(token_type_embeddings, tt.narrow(1, start, t))));
}

BertLayer::SelfAttention::SelfAttention(Module* parent, const std::string& name,
                                        const BertConfig& c, const parallel::ParallelContext& ctx)
    : Module(parent, name),
      query(this, "query", c.hidden_size, c.hidden_size, ctx.tensor_group(),
            /*gather_output=*/false, true, ctx.sequence_parallel),
      key(this, "key", c.hidden_size, c.hidden_size, ctx.tensor_group(), /*gather_output=*/false,
          true, ctx.sequence_parallel),
      value(this, "value", c.hidden_size, c.hidden_size, ctx.tensor_group(),
            /*gather_output=*/false, true, ctx.sequence_parallel) {}

BertLayer::Output::Output(Module* parent, const std::string& name, int64_t in, const BertConfig& c,
                          const parallel::ParallelContext& ctx)
    : Module(parent, name),
      dense(in == 0 ? nullptr
                    : std::make_unique<parallel::RowParallelLinear>(
                          this, "dense", in, c.hidden_size, ctx.tensor_group(),
                          /*input_is_parallel=*/true, true, ctx.sequence_parallel)),
      LayerNorm(this, "LayerNorm", c.hidden_size, c.layer_norm_eps, true, true,
                ctx.sequence_group()),
      dropout(this, "dropout", c.hidden_dropout_prob) {}

Tensor BertLayer::Output::forward(const Tensor& x, const Tensor& residual, double branch_scale) {
  nn::ModuleScope scope(*this);
  return LayerNorm(nn::scale_branch(dropout((*dense)(x)), branch_scale) + residual);
}

Tensor BertLayer::Output::finish(const Tensor& y, const Tensor& residual, double branch_scale) {
  nn::ModuleScope scope(*this);
  return LayerNorm(nn::scale_branch(dropout(y), branch_scale) + residual);
}

Tensor BertLayer::Output::forward_of_gelu(const Tensor& x, GeluApprox approximate,
                                          bool recompute_gelu, const Tensor& residual,
                                          double branch_scale) {
  nn::ModuleScope scope(*this);
  return LayerNorm(nn::scale_branch(dropout(dense->forward_of_gelu(x, approximate, recompute_gelu)),
                                    branch_scale) +
                   residual);
}

BertLayer::Attention::Attention(Module* parent, const std::string& name, const BertConfig& c,
                                const parallel::ParallelContext& ctx)
    : Module(parent, name),
      self(this, "self", c, ctx),
      output(this, "output", c.hidden_size, c, ctx) {}

BertLayer::Intermediate::Intermediate(Module* parent, const std::string& name, const BertConfig& c,
                                      const parallel::ParallelContext& ctx)
    : Module(parent, name),
      dense(this, "dense", c.hidden_size, c.intermediate_size, ctx.tensor_group(),
            /*gather_output=*/false, true, ctx.sequence_parallel) {}

BertLayer::BertLayer(Module* parent, const std::string& name, const BertConfig& c,
                     const parallel::ParallelContext& ctx, int64_t layer)
    : Module(parent, name),
      attention(this, "attention", c, ctx),
      heads(c.num_attention_heads / ctx.tensor_parallel_size()),
      activation(c.activation),
      sparse(c.sparse_attention, c.num_attention_heads, c.max_position_embeddings, layer, ctx),
      kernel(c.transformer_kernel),
      tensor_rank(ctx.tensor_parallel_rank()),
      tensor_ranks(ctx.tensor_parallel_size()) {
  if (kernel) sparse.check_probability_dropout(kernel->attn_dropout_ratio, "BERT");
  if (c.moe && c.moe->is_moe_layer(layer)) {
    const auto make_expert = [&c](Module* parent, const std::string& n) {
      return std::unique_ptr<nn::UnaryModule>(std::make_unique<BertExpert>(parent, n, c));
    };
    moe = std::make_unique<parallel::MoE>(this, "moe", c.hidden_size, make_expert,
                                          c.moe->layer_options(layer), ctx.experts);
    output = std::make_unique<Output>(this, "output", 0, c, ctx);
  } else {
    intermediate = std::make_unique<Intermediate>(this, "intermediate", c, ctx);
    output = std::make_unique<Output>(this, "output", c.intermediate_size, c, ctx);
  }
  const bool invertible = kernel && kernel->normalize_invertible;
  attention.output.LayerNorm.invertible = invertible;
  output->LayerNorm.invertible = invertible;
}

BertExpert::Dense::Dense(Module* parent, const std::string& name, int64_t in, int64_t out)
    : Module(parent, name), dense(this, "dense", in, out) {}

BertExpert::BertExpert(Module* parent, const std::string& name, const BertConfig& c)
    : nn::UnaryModule(parent, name),
      intermediate(this, "intermediate", c.hidden_size, c.intermediate_size),
      output(this, "output", c.intermediate_size, c.hidden_size),
      activation(c.activation) {}

Tensor BertExpert::forward(const Tensor& x) {
  return output.dense(gelu(intermediate.dense(x), activation));
}

Tensor BertLayer::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& mask) const {
  // (sparse: the [B, 1, 1, T] mask as the key padding mask [B, T])
  if (sparse.enabled())
    return sparse.attend(q, k, v, mask.defined() ? mask.select(1, 0).select(1, 0) : Tensor(),
                         false);
  const double p = kernel && is_training() ? kernel->attn_dropout_ratio : 0.0;
  if (p == 0) return scaled_dot_product_attention(q, k, v, mask);
  // This rank's heads are its chunk of dim 1 of one process's [B, H, T, T] probabilities:
  // it draws that chunk of one process's dropout masks.
  SequenceShardGuard heads_chunk(tensor_rank, tensor_ranks);
  return scaled_dot_product_attention(q, k, v, mask, false, std::nullopt, p);
}

Tensor BertLayer::forward(const Tensor& x, const Tensor& mask, double branch_scale) {
  nn::ModuleScope scope(*this);
  auto& s = attention.self;
  Tensor q, k, v;
  if (kernel) {  // q, k and v from one GEMM
    const Tensor qkv =
        parallel::ColumnParallelLinear::joined_forward({&s.query, &s.key, &s.value}, x);
    const std::vector<Tensor> parts = split(qkv, qkv.size(2) / 3, 2);
    q = nn::split_heads(parts[0], heads), k = nn::split_heads(parts[1], heads),
    v = nn::split_heads(parts[2], heads);
  } else {
    q = nn::split_heads(s.query(x), heads), k = nn::split_heads(s.key(x), heads),
    v = nn::split_heads(s.value(x), heads);
  }
  const Tensor a =
      attention.output.forward(nn::merge_heads(attend(q, k, v, mask)), x, branch_scale);
  if (moe) {
    const parallel::MoE::Output out = moe->forward(a);
    l_aux = out.l_aux;
    return output->finish(out.output, a, branch_scale);
  }
  return output->forward_of_gelu(intermediate->dense(a), activation,
                                 kernel && kernel->gelu_checkpoint, a, branch_scale);
}

BertModel::Encoder::Encoder(Module* parent, const std::string& name, const BertConfig& c,
                            const parallel::ParallelContext& ctx)
    : Module(parent, name), layer(this, "layer") {
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer.emplace_back<BertLayer>(c, ctx, i);
}

BertModel::BertModel(Module* parent, const std::string& name, const BertConfig& c, bool with_pooler,
                     const parallel::ParallelContext& ctx)
    : Module(parent, name),
      embeddings(this, "embeddings", c, ctx),
      encoder(this, "encoder", c, ctx),
      config(c),
      context(ctx) {
  c.validate();
  if (with_pooler) {
    pooler = std::make_unique<nn::Module>(this, "pooler");
    pooler_dense =
        std::make_unique<nn::Linear>(pooler.get(), "dense", c.hidden_size, c.hidden_size);
  }
}

Tensor bert_attention_mask(const Batch& b) {
  if (!b.attention_mask.defined()) return {};
  TS_CHECK(b.attention_mask.shape() == b.input_ids.shape(), "BERT: attention_mask ",
           b.attention_mask.describe(), " must match input_ids ", b.input_ids.describe());
  return ne(b.attention_mask, zeros({}, b.attention_mask.dtype(), b.attention_mask.device()))
      .unsqueeze(1)
      .unsqueeze(1);
}

namespace {

// The key padding mask [B, 1, 1, T] at a token subset's kept positions: [B, 1, 1, kept].
Tensor kept_mask(const Tensor& mask, const nn::TokenSubset& s) {
  if (!mask.defined()) return mask;
  const Tensor rows = cast(mask.reshape({s.batch * s.tokens, 1}), DType::Float32);
  return embedding(rows, s.gather_index).reshape({s.batch, 1, 1, s.kept}).to(DType::Bool);
}

}  // namespace

Tensor BertModel::forward(const Batch& b) {
  nn::ModuleScope scope(*this);
  TS_CHECK(b.input_ids.dim() == 2, "BERT: input_ids must be [batch, time], got ",
           b.input_ids.describe());
  const Tensor mask = bert_attention_mask(b);
  const auto seq = context.sequence_group();
  // With sequence parallelism the layers' dropout masks are this rank's chunk too.
  const parallel::SequenceShardScope chunk(seq.get());
  for (size_t i = 0; i < encoder.layer.size(); ++i) encoder.layer.at<BertLayer>(i).l_aux = Tensor();
  moe_aux_loss = Tensor();
  const std::vector<nn::KeptLayer> kept =
      nn::kept_layers(layer_drop.get(), is_training(), static_cast<int64_t>(encoder.layer.size()));
  return parallel::run_layers(
      activation_checkpointing.get(), static_cast<int64_t>(kept.size()),
      [this, mask, kept](int64_t i, const Tensor& in) {
        const nn::KeptLayer& k = kept[static_cast<size_t>(i)];
        BertLayer& layer = encoder.layer.at<BertLayer>(static_cast<size_t>(k.index));
        // random-LTD: the layer sees its kept tokens (and their padding), the rest bypass it.
        return nn::run_on_kept_tokens(token_drop.get(), is_training(), k.index, in,
                                      [&](const Tensor& x, const nn::TokenSubset* s) {
                                        return layer.forward(x, s ? kept_mask(mask, *s) : mask,
                                                             k.scale);
                                      });
      },
      embeddings.forward(b.input_ids, b.token_type_ids), /*partition=*/!seq,
      [this, kept](int64_t i) {
        return encoder.layer.at<BertLayer>(static_cast<size_t>(kept[static_cast<size_t>(i)].index))
            .l_aux;
      },
      &moe_aux_loss);
}

Tensor bert_first_token(const Tensor& sequence_output, parallel::ProcessGroup* sequence_group) {
  if (!sequence_group) return sequence_output.select(1, 0);
  return parallel::gather_from_sequence_parallel_region(sequence_output.narrow(1, 0, 1),
                                                        *sequence_group, 1, false)
      .select(1, 0);
}

Tensor BertModel::pool(const Tensor& sequence_output) {
  nn::ModuleScope scope(*this);
  TS_CHECK(pooler_dense, "BERT: this model has no pooler");
  return tanh((*pooler_dense)(bert_first_token(sequence_output, context.sequence_group().get())));
}

BertLMPredictionHead::Transform::Transform(Module* parent, const std::string& name,
                                           const BertConfig& c,
                                           std::shared_ptr<parallel::ProcessGroup> sequence_group)
    : Module(parent, name),
      dense(this, "dense", c.hidden_size, c.hidden_size),
      LayerNorm(this, "LayerNorm", c.hidden_size, c.layer_norm_eps, true, true,
                std::move(sequence_group)) {}

BertLMPredictionHead::BertLMPredictionHead(Module* parent, const std::string& name,
                                           const BertConfig& c,
                                           const parallel::ParallelContext& ctx,
                                           const parallel::VocabParallelEmbedding& word_embeddings)
    : Module(parent, name),
      transform(this, "transform", c, ctx.sequence_group()),
      activation(c.activation),
      vocab_size(c.vocab_size),
      split(word_embeddings.group() != nullptr),
      sequence_group(ctx.sequence_group()) {
  register_parameter("bias", &bias, zeros({word_embeddings.vocab_per_rank}));
}

parallel::TensorParallelLayout BertLMPredictionHead::tensor_parallel_splits() const {
  if (!split) return {};
  return {{"bias", {0, 1, vocab_size}}};
}

Tensor bert_mlm_transform(BertLMPredictionHead::Transform& transform, const Tensor& x,
                          GeluApprox activation, parallel::ProcessGroup* sequence_group) {
  auto& dense = transform.dense;
  if (!sequence_group) return transform.LayerNorm(gelu(dense(x), activation));
  parallel::ProcessGroup& group = *sequence_group;
  const Tensor d = linear(x, parallel::sequence_parallel_weight(dense.weight, group),
                          parallel::sequence_parallel_weight(dense.bias, group));
  return transform.LayerNorm(gelu(d, activation));
}

Tensor BertLMPredictionHead::forward(const Tensor& x,
                                     const parallel::VocabParallelEmbedding& word_embeddings) {
  nn::ModuleScope scope(*this);
  const Tensor h = bert_mlm_transform(transform, x, activation, sequence_group.get());
  if (!word_embeddings.group()) return linear(h, word_embeddings.weight, bias);
  return parallel::vocab_parallel_logits(h, word_embeddings, sequence_group != nullptr) + bias;
}

BertForPreTraining::Cls::Cls(Module* parent, const std::string& name, const BertConfig& c, bool nsp,
                             const parallel::ParallelContext& ctx,
                             const parallel::VocabParallelEmbedding& word_embeddings)
    : Module(parent, name), predictions(this, "predictions", c, ctx, word_embeddings) {
  if (nsp)
    seq_relationship = std::make_unique<nn::Linear>(this, "seq_relationship", c.hidden_size, 2);
}

BertForPreTraining::BertForPreTraining(const BertConfig& c, bool nsp,
                                       const parallel::ParallelContext& ctx)
    : BertForPreTraining(c, nsp, ctx, default_generator().state()) {}

BertForPreTraining::BertForPreTraining(const BertConfig& c, bool nsp,
                                       const parallel::ParallelContext& ctx, GeneratorState start)
    : bert(this, "bert", checked(c, ctx), nsp, ctx),
      cls(this, "cls", c, nsp, ctx, bert.embeddings.word_embeddings),
      config(c),
      with_nsp(nsp) {
  const auto group = ctx.tensor_group();
  if (!group && ctx.experts.ep_size() == 1) {
    init_weights();
    return;
  }
  const int64_t padded = bert.embeddings.word_embeddings.padded_embeddings;
  if (group && padded != c.vocab_size && group->rank() == 0)
    std::cerr << "BERT tensor parallel: vocab_size " << c.vocab_size << " padded to " << padded
              << " (a multiple of " << group->size()
              << " ranks); the padding rows are left out of the loss\n";
  // The whole model's initialisation from the generator as it was (as BertForPreTraining(c)
  // would draw it), sharded (with expert parallelism: this rank's experts of it, by their
  // global names); the generator is left where that model leaves it.
  default_generator().set_state(start);
  BertForPreTraining whole(c, nsp);
  load_from_whole(whole);
}

Tensor BertForPreTraining::logits(const Batch& b) {
  const auto& words = bert.embeddings.word_embeddings;
  return parallel::whole_vocab_logits(cls.predictions.forward(bert.forward(b), words), words);
}

Tensor BertForPreTraining::nsp_logits(const Batch& b) {
  TS_CHECK(with_nsp, "BERT: this model has no next-sentence head");
  return (*cls.seq_relationship)(bert.pool(bert.forward(b)));
}

Tensor BertForPreTraining::loss(const Batch& b) {
  nn::ModuleScope scope(*this);
  TS_CHECK(b.targets.defined(), "BERT loss: the batch has no targets (MLM labels)");
  TS_CHECK(b.targets.shape() == b.input_ids.shape(), "BERT loss: targets ", b.targets.describe(),
           " must match input_ids ", b.input_ids.describe());
  const Tensor seq = bert.forward(b);
  const Tensor lg = cls.predictions.forward(seq, bert.embeddings.word_embeddings);
  const Tensor targets = b.targets.reshape({-1});
  Tensor loss;
  if (const auto group = bert.context.tensor_group()) {
    const int64_t per = bert.embeddings.word_embeddings.vocab_per_rank;
    loss = b.weighted(
        parallel::vocab_parallel_cross_entropy(lg.view({-1, per}), targets, *group, -100));
  } else {
    // A batch without masked positions (short NSP pairs) adds no MLM loss instead of a NaN mean.
    loss =
        b.target_weight == 0.0 && b.loss_terms() > 0
            ? cross_entropy(lg.view({-1, config.vocab_size}), targets, -100)
            : cross_entropy(lg.view({-1, config.vocab_size}), targets, -100, 0.0, Reduction::Sum) *
                  b.target_weight;
  }
  if (with_nsp && b.next_sentence_label.defined())
    loss = loss + cross_entropy((*cls.seq_relationship)(bert.pool(seq)),
                                b.next_sentence_label.reshape({-1}));
  if (config.moe)
    if (const Tensor aux = moe_aux_loss(); aux.defined())
      loss = loss + aux * config.moe->aux_loss_coef;
  return loss;
}

Tensor BertForPreTraining::moe_aux_loss() const {
  return bert.moe_aux_loss;
}

void BertForPreTraining::load_from_whole(BertForPreTraining& whole) {
  TS_CHECK(whole.config.to_json("") == config.to_json("") && whole.with_nsp == with_nsp,
           "BERT: load_from_whole needs a model of the same config and heads");
  parallel::load_whole_state(*this, whole.state_dict(), bert.context.tensor_parallel_rank(),
                             bert.context.tensor_parallel_size());
}

void BertForPreTraining::load_from_whole(PretrainedModel& whole, const std::string& source) {
  auto* bert_model = dynamic_cast<BertForPreTraining*>(&whole);
  TS_CHECK(bert_model, source, " is not a BERT model (", whole.type_name(), ")");
  load_from_whole(*bert_model);
}

void BertForPreTraining::set_random_layer_token_drop(
    std::shared_ptr<nn::RandomLayerTokenDrop> drop) {
  if (drop)
    check_token_drop_layout("BERT", config.sparse_attention.has_value(),
                            bert.context.sequence_parallel);
  bert.token_drop = std::move(drop);
}

void BertForPreTraining::check_divisible(const BertConfig& c, int64_t n) {
  c.validate();
  TS_CHECK(c.num_attention_heads % n == 0, "BERT tensor parallel: num_attention_heads ",
           c.num_attention_heads, " does not divide among ", n,
           " ranks (each rank holds whole heads)");
  TS_CHECK(c.intermediate_size % n == 0, "BERT tensor parallel: intermediate_size ",
           c.intermediate_size, " does not divide among ", n, " ranks");
}

std::vector<HFWeight> BertForPreTraining::hf_weights() {
  std::vector<HFWeight> out;
  for (auto& [name, t] : named_parameters()) out.push_back({name, name, false});
  return out;
}

bool BertForPreTraining::hf_ignorable(const std::string& key) const {
  if (key == "bert.embeddings.position_ids" || key == "embeddings.position_ids" ||
      key == "cls.predictions.decoder.weight" || key == "cls.predictions.decoder.bias")
    return true;
  // A masked-LM model loading a pretraining checkpoint leaves its NSP parts unused.
  const bool nsp_part =
      key.rfind("cls.seq_relationship.", 0) == 0 || key.find("pooler.") != std::string::npos;
  return !with_nsp && nsp_part;
}

void BertForPreTraining::init_weights() {
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters()) {
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (name.find("LayerNorm.") != std::string::npos)
      t->fill_(is_bias ? 0.0 : 1.0);
    else if (is_bias || name == "cls.predictions.bias")
      t->zero_();
    else
      t->copy_(randn(t->shape(), t->dtype(), t->device()) * 0.02);
  }
}

}  // namespace tessera::models
