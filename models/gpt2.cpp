#include "tessera/models/gpt2.h"

#include <algorithm>
#include <cmath>
#include <iostream>

#include "tessera/grad_mode.h"
#include "tessera/models/sparse_attention.h"
#include "tessera/parallel/tensor_parallel_layout.h"

namespace tessera::models {

namespace {

int64_t inner_size(const GPT2Config& c) {
  return c.n_inner ? c.n_inner : 4 * c.n_embd;
}

// The config, checked before any layer is built.
const GPT2Config& checked(const GPT2Config& c, const parallel::ParallelContext& ctx) {
  GPT2LMHeadModel::check_divisible(c, ctx.tensor_parallel_size());
  return c;
}

}  // namespace

GPT2Attention::GPT2Attention(Module* parent, const std::string& name, const GPT2Config& c,
                             const parallel::ParallelContext& ctx, int64_t layer)
    : Module(parent, name),
      c_attn(this, "c_attn", c.n_embd, 3 * c.n_embd, ctx.tensor_group(), /*gather_output=*/false,
             c.bias, ctx.sequence_parallel, /*stride=*/3),
      c_proj(this, "c_proj", c.n_embd, c.n_embd, ctx.tensor_group(), /*input_is_parallel=*/true,
             c.bias, ctx.sequence_parallel),
      resid_dropout(this, "resid_dropout", c.dropout),
      n_head(c.n_head / ctx.tensor_parallel_size()),
      sparse(c.sparse_attention, c.n_head, c.n_positions, layer, ctx),
      kernel(c.transformer_kernel),
      tensor_rank(ctx.tensor_parallel_rank()),
      tensor_ranks(ctx.tensor_parallel_size()) {
  if (kernel) sparse.check_probability_dropout(kernel->attn_dropout_ratio, "GPT-2");
}

Tensor GPT2Attention::forward(const Tensor& x, KVCache* cache, size_t layer) {
  nn::ModuleScope scope(*this);
  const Tensor qkv = c_attn(x);  // [B, T, 3 C / N]
  const auto parts = split(qkv, qkv.size(2) / 3, 2);
  Tensor k = nn::split_heads(parts[1], n_head), v = nn::split_heads(parts[2], n_head);
  if (cache) {
    if (cache->keys.size() <= layer) {
      cache->keys.resize(layer + 1);
      cache->values.resize(layer + 1);
    }
    if (cache->keys[layer].defined()) {
      k = cat({cache->keys[layer], k}, 2);
      v = cat({cache->values[layer], v}, 2);
    }
    cache->keys[layer] = k;
    cache->values[layer] = v;
  }
  const Tensor o = attend(nn::split_heads(parts[0], n_head), k, v, cache);
  return resid_dropout(c_proj(nn::merge_heads(o)));
}

Tensor GPT2Attention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                             KVCache* cache) const {
  const double p = kernel && is_training() ? kernel->attn_dropout_ratio : 0.0;
  if (p > 0 && !cache) {
    // This rank's heads are its chunk of dim 1 of one process's [B, H, T, T] probabilities.
    SequenceShardGuard heads_chunk(tensor_rank, tensor_ranks);
    return scaled_dot_product_attention(q, k, v, {}, true, std::nullopt, p);
  }
  if (!sparse.enabled()) {
    const Tensor mask = cache ? cache->attend : Tensor();  // (padded rows of a batch)
    return scaled_dot_product_attention(q, k, v, mask, true);
  }
  if (!cache) return sparse.attend(q, k, v, {}, true);
  // A cache's step: the layout's rows for the new positions as a dense mask (one row or a
  // prompt: no blocks to skip), the padding of each row hidden.
  const Tensor mask =
      sparse.cache_mask(q.size(0), q.size(2), k.size(2), cache->left_padding, q.device());
  return scaled_dot_product_attention(q, k, v, mask, false);
}

GPT2MLP::GPT2MLP(Module* parent, const std::string& name, const GPT2Config& c,
                 const parallel::ParallelContext& ctx)
    : Module(parent, name),
      c_fc(this, "c_fc", c.n_embd, inner_size(c), ctx.tensor_group(), /*gather_output=*/false,
           c.bias, ctx.sequence_parallel),
      c_proj(this, "c_proj", inner_size(c), c.n_embd, ctx.tensor_group(),
             /*input_is_parallel=*/true, c.bias, ctx.sequence_parallel),
      dropout(this, "dropout", c.dropout),
      activation(c.activation),
      gelu_checkpoint(c.transformer_kernel && c.transformer_kernel->gelu_checkpoint) {}

Tensor GPT2MLP::forward(const Tensor& x) {
  nn::ModuleScope scope(*this);
  return dropout(c_proj.forward_of_gelu(c_fc(x), activation, gelu_checkpoint));
}

GPT2Block::GPT2Block(Module* parent, const std::string& name, const GPT2Config& c,
                     const parallel::ParallelContext& ctx, int64_t layer)
    : Module(parent, name),
      ln_1(this, "ln_1", c.n_embd, c.layer_norm_epsilon, true, c.bias, ctx.sequence_group()),
      attn(this, "attn", c, ctx, layer),
      ln_2(this, "ln_2", c.n_embd, c.layer_norm_epsilon, true, c.bias, ctx.sequence_group()) {
  const bool invertible = c.transformer_kernel && c.transformer_kernel->normalize_invertible;
  ln_1.invertible = invertible;
  ln_2.invertible = invertible;
  if (!c.moe || !c.moe->is_moe_layer(layer)) {
    mlp = std::make_unique<GPT2MLP>(this, "mlp", c, ctx);
    return;
  }
  const auto make_expert = [&c](Module* parent, const std::string& n) {
    return std::unique_ptr<nn::UnaryModule>(std::make_unique<GPT2Expert>(parent, n, c));
  };
  moe = std::make_unique<parallel::MoE>(this, "mlp", c.n_embd, make_expert,
                                        c.moe->layer_options(layer), ctx.experts);
  moe_dropout = std::make_unique<nn::Dropout>(this, "mlp_dropout", c.dropout);
}

Tensor GPT2Block::feed_forward(const Tensor& x) {
  if (mlp) return mlp->forward(x);
  const parallel::MoE::Output out = moe->forward(x);
  l_aux = out.l_aux;
  return (*moe_dropout)(out.output);
}

Tensor GPT2Block::forward(const Tensor& x, KVCache* cache, size_t layer, double branch_scale) {
  nn::ModuleScope scope(*this);
  const Tensor h = x + nn::scale_branch(attn.forward(ln_1(x), cache, layer), branch_scale);
  return h + nn::scale_branch(feed_forward(ln_2(h)), branch_scale);
}

GPT2Expert::GPT2Expert(Module* parent, const std::string& name, const GPT2Config& c)
    : nn::UnaryModule(parent, name),
      c_fc(this, "c_fc", c.n_embd, inner_size(c), nullptr, /*gather_output=*/false, c.bias),
      c_proj(this, "c_proj", inner_size(c), c.n_embd, nullptr, /*input_is_parallel=*/true, c.bias),
      activation(c.activation),
      gelu_checkpoint(c.transformer_kernel && c.transformer_kernel->gelu_checkpoint) {}

Tensor GPT2Expert::forward(const Tensor& x) {
  return c_proj.forward_of_gelu(c_fc(x), activation, gelu_checkpoint);
}

namespace {

// Row b's positions [B, T] after left_padding[b] filler positions (numbered 0 too, unseen),
// and the keys each row attends to, set in the cache for the layers.
Tensor padded_positions(KVCache& cache, int64_t B, int64_t T, Device device) {
  TS_CHECK(static_cast<int64_t>(cache.left_padding.size()) == B, "GPT-2: the cache pads ",
           cache.left_padding.size(), " rows, the batch has ", B);
  const int64_t start = cache.length, keys = start + T;
  std::vector<int64_t> pos(static_cast<size_t>(B * T));
  std::vector<double> attend(static_cast<size_t>(B * keys));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t pad = cache.left_padding[static_cast<size_t>(b)];
    for (int64_t t = 0; t < T; ++t)
      pos[static_cast<size_t>(b * T + t)] = std::max<int64_t>(0, start + t - pad);
    for (int64_t j = 0; j < keys; ++j) attend[static_cast<size_t>(b * keys + j)] = j >= pad;
  }
  cache.attend = from_vector(attend, {B, 1, 1, keys}).to(DType::Bool).to(device);
  return from_vector(pos, {B, T}).to(device);
}

}  // namespace

Tensor gpt2_input_embeddings(nn::UnaryModule& wte, nn::Embedding& wpe, nn::Dropout& drop,
                             const Tensor& ids, parallel::ProcessGroup* sequence_group,
                             const std::string& what) {
  TS_CHECK(ids.dim() == 2, what, ": input_ids must be [batch, time], got ", ids.describe());
  const int64_t T = ids.size(1), n_positions = wpe.weight.size(0);
  TS_CHECK(T <= n_positions, what, ": sequence of ", T,
           " tokens exceeds the model's n_positions = ", n_positions);
  if (!sequence_group) {
    const Tensor pos = arange(0, static_cast<double>(T), 1, DType::Int64, ids.device());
    return drop(wte(ids) + wpe(pos));
  }
  // This rank's positions; its dropout masks are its chunk of the whole sequence's.
  const Tensor pos = parallel::sequence_parallel_positions(T, sequence_group, ids.device(), what);
  SequenceShardGuard chunk(sequence_group->rank(), sequence_group->size());
  return drop(wte(ids) +
              embedding(parallel::sequence_parallel_weight(wpe.weight, *sequence_group), pos));
}

GPT2Model::GPT2Model(Module* parent, const std::string& name, const GPT2Config& c,
                     const parallel::ParallelContext& ctx)
    : Module(parent, name),
      wte(this, "wte", c.vocab_size, c.n_embd, ctx.tensor_group(), ctx.sequence_parallel),
      wpe(this, "wpe", c.n_positions, c.n_embd),
      drop(this, "drop", c.dropout),
      h(this, "h"),
      ln_f(this, "ln_f", c.n_embd, c.layer_norm_epsilon, true, c.bias, ctx.sequence_group()),
      config(c),
      context(ctx) {
  c.validate();
  for (int64_t i = 0; i < c.n_layer; ++i) h.emplace_back<GPT2Block>(c, ctx, i);
}

Tensor GPT2Model::blocks(const Tensor& x) {
  const std::vector<nn::KeptLayer> kept =
      nn::kept_layers(layer_drop.get(), is_training(), static_cast<int64_t>(h.size()));
  return parallel::run_layers(
      activation_checkpointing.get(), static_cast<int64_t>(kept.size()),
      [this, kept](int64_t i, const Tensor& in) {
        const nn::KeptLayer& k = kept[static_cast<size_t>(i)];
        GPT2Block& block = h.at<GPT2Block>(static_cast<size_t>(k.index));
        // random-LTD: the block sees its kept tokens (causal among them), the rest bypass it.
        return nn::run_on_kept_tokens(token_drop.get(), is_training(), k.index, in,
                                      [&](const Tensor& x, const nn::TokenSubset*) {
                                        return block.forward(x, nullptr,
                                                             static_cast<size_t>(k.index), k.scale);
                                      });
      },
      x, /*partition=*/!context.sequence_group(),
      [this, kept](int64_t i) {
        return h.at<GPT2Block>(static_cast<size_t>(kept[static_cast<size_t>(i)].index)).l_aux;
      },
      &moe_aux_loss);
}

Tensor GPT2Model::forward(const Tensor& input_ids, KVCache* cache) {
  nn::ModuleScope scope(*this);
  TS_CHECK(input_ids.dim() == 2, "GPT-2: input_ids must be [batch, time], got ",
           input_ids.describe());
  for (size_t i = 0; i < h.size(); ++i) h.at<GPT2Block>(i).l_aux = Tensor();  // (a skipped one)
  moe_aux_loss = Tensor();
  if (const auto seq = context.sequence_group()) {
    TS_CHECK(!cache, "GPT-2: a key/value cache needs whole sequences (no sequence_parallel)");
    // (The blocks' dropout masks: this rank's chunk of the whole sequence's too.)
    SequenceShardGuard chunk(seq->rank(), seq->size());
    return ln_f(blocks(gpt2_input_embeddings(wte, wpe, drop, input_ids, seq.get(), "GPT-2")));
  }
  const int64_t T = input_ids.size(1), start = cache ? cache->length : 0;
  const bool padded = cache && !cache->left_padding.empty();
  const int64_t least_padding =
      padded ? *std::min_element(cache->left_padding.begin(), cache->left_padding.end()) : 0;
  TS_CHECK(start + T - least_padding <= config.n_positions, "GPT-2: sequence of ",
           start + T - least_padding,
           " tokens exceeds the model's n_positions = ", config.n_positions);
  const Tensor pos = padded ? padded_positions(*cache, input_ids.size(0), T, input_ids.device())
                            : arange(static_cast<double>(start), static_cast<double>(start + T), 1,
                                     DType::Int64, input_ids.device());
  Tensor x = drop(wte(input_ids) + wpe(pos));
  if (!cache) return ln_f(blocks(x));  // (activation checkpoints, layer drop)
  for (size_t i = 0; i < h.size(); ++i) x = h.at<GPT2Block>(i).forward(x, cache, i);
  if (cache) cache->length += T;
  return ln_f(x);
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& c, const parallel::ParallelContext& ctx)
    : GPT2LMHeadModel(c, ctx, default_generator().state()) {}

void GPT2LMHeadModel::set_random_layer_token_drop(std::shared_ptr<nn::RandomLayerTokenDrop> drop) {
  if (drop)
    check_token_drop_layout("GPT-2", config.sparse_attention.has_value(),
                            transformer.context.sequence_parallel);
  transformer.token_drop = std::move(drop);
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& c, const parallel::ParallelContext& ctx,
                                 GeneratorState start)
    : transformer(this, "transformer", checked(c, ctx), ctx), config(c) {
  const auto group = ctx.tensor_group();
  if (!group && ctx.experts.ep_size() == 1) {
    init_weights();
    return;
  }
  const int64_t padded = transformer.wte.padded_embeddings;
  if (group && padded != c.vocab_size && group->rank() == 0)
    std::cerr << "GPT-2 tensor parallel: vocab_size " << c.vocab_size << " padded to " << padded
              << " (a multiple of " << group->size()
              << " ranks); the padding rows are left out of the loss\n";
  // The whole model's initialisation, drawn from the default generator as it was before this
  // model's layers were built (as GPT2LMHeadModel(c) would draw it), sharded (and, with expert
  // parallelism, this rank's experts of it, by their global names): a tensor- or
  // expert-parallel run starts where one process does, and the generator is left where that
  // process leaves it.
  default_generator().set_state(start);
  GPT2LMHeadModel whole(c);
  load_from_whole(whole);
}

Tensor GPT2LMHeadModel::forward(const Tensor& input_ids, KVCache* cache) {
  nn::ModuleScope scope(*this);
  // The tied head (tensor parallel: this rank's vocabulary columns).
  return parallel::vocab_parallel_logits(transformer.forward(input_ids, cache), transformer.wte,
                                         transformer.context.sequence_parallel);
}

Tensor GPT2LMHeadModel::loss(const Batch& b) {
  nn::ModuleScope scope(*this);
  TS_CHECK(b.targets.defined(), "GPT-2 loss: the batch has no targets");
  TS_CHECK(b.targets.shape() == b.input_ids.shape(), "GPT-2 loss: targets ", b.targets.describe(),
           " must match input_ids ", b.input_ids.describe());
  const Tensor ce = token_loss(b);
  // (MoE: each layer's load-balancing loss of this forward, not weighted by the token count.)
  const Tensor aux = config.moe ? moe_aux_loss() : Tensor();
  return aux.defined() ? ce + aux * config.moe->aux_loss_coef : ce;
}

Tensor GPT2LMHeadModel::token_loss(const Batch& b) {
  const Tensor lg = forward(b.input_ids);
  const Tensor targets = b.targets.reshape({-1});
  if (const auto group = transformer.context.tensor_group()) {
    return b.weighted(parallel::vocab_parallel_cross_entropy(
        lg.view({-1, transformer.wte.vocab_per_rank}), targets, *group, -100));
  }
  if (b.target_weight == 0.0) return cross_entropy(lg.view({-1, config.vocab_size}), targets, -100);
  return cross_entropy(lg.view({-1, config.vocab_size}), targets, -100, 0.0, Reduction::Sum) *
         b.target_weight;
}

Tensor GPT2LMHeadModel::moe_aux_loss() const {
  return transformer.moe_aux_loss;
}

void GPT2LMHeadModel::load_from_whole(GPT2LMHeadModel& whole) {
  TS_CHECK(whole.config.to_json() == config.to_json(),
           "GPT-2: load_from_whole needs a model of the same config");
  parallel::load_whole_state(*this, whole.state_dict(), transformer.context.tensor_parallel_rank(),
                             transformer.context.tensor_parallel_size());
}

void GPT2LMHeadModel::load_from_whole(PretrainedModel& whole, const std::string& source) {
  auto* gpt = dynamic_cast<GPT2LMHeadModel*>(&whole);
  TS_CHECK(gpt, source, " is not a GPT-2 model (", whole.type_name(), ")");
  load_from_whole(*gpt);
}

void GPT2LMHeadModel::check_divisible(const GPT2Config& c, int64_t n) {
  c.validate();
  TS_CHECK(c.n_head % n == 0, "GPT-2 tensor parallel: n_head ", c.n_head, " does not divide among ",
           n, " ranks (each rank holds whole heads)");
  TS_CHECK(inner_size(c) % n == 0, "GPT-2 tensor parallel: the MLP's ", inner_size(c),
           " features do not divide among ", n, " ranks");
}

std::vector<HFWeight> GPT2LMHeadModel::hf_weights() {
  std::vector<HFWeight> out;
  for (auto& [name, t] : named_parameters()) {
    // HF's Conv1D keeps [in, out]: every Linear inside the blocks is transposed.
    const bool conv1d = name.find(".c_attn.weight") != std::string::npos ||
                        name.find(".c_proj.weight") != std::string::npos ||
                        name.find(".c_fc.weight") != std::string::npos;
    out.push_back({name, name, conv1d});
  }
  return out;
}

bool GPT2LMHeadModel::hf_ignorable(const std::string& key) const {
  auto ends_with = [&](const std::string& s) {
    return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0;
  };
  return key == "lm_head.weight" || ends_with(".attn.bias") || ends_with(".attn.masked_bias");
}

std::unique_ptr<PretrainedModel> GPT2LMHeadModel::hf_export_model() const {
  if (config.bias) return nullptr;
  GPT2Config with_bias = config;
  with_bias.bias = true;
  auto full = std::make_unique<GPT2LMHeadModel>(with_bias);
  NoGradGuard no_grad;
  for (auto& [name, t] : full->named_parameters()) t->zero_();
  return full;
}

void GPT2LMHeadModel::init_weights() {
  NoGradGuard no_grad;
  const double resid_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.n_layer));
  for (auto& [name, t] : named_parameters()) {
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (name.find(".ln_") != std::string::npos || name.find("ln_f.") != std::string::npos) {
      t->fill_(is_bias ? 0.0 : 1.0);
    } else if (is_bias) {
      t->zero_();
    } else {
      const bool resid = name.find(".c_proj.weight") != std::string::npos;
      t->copy_(randn(t->shape(), t->dtype(), t->device()) * (resid ? resid_std : 0.02));
    }
  }
}

}  // namespace tessera::models
