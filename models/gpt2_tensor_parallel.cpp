#include "tessera/models/gpt2_tensor_parallel.h"

#include <iostream>

#include "tessera/parallel/tensor_parallel_layout.h"

namespace tessera::models {

namespace {

int64_t inner_size(const GPT2Config& c) {
  return c.n_inner ? c.n_inner : 4 * c.n_embd;
}

// The config, checked before any layer is built.
const GPT2Config& checked(const GPT2Config& c, const parallel::ProcessGroup& g) {
  GPT2TensorParallelLMHeadModel::check_divisible(c, g.size());
  return c;
}

}  // namespace

TPGPT2Attention::TPGPT2Attention(Module* parent, const std::string& name, const GPT2Config& c,
                                 std::shared_ptr<parallel::ProcessGroup> g, bool sp)
    : Module(parent, name),
      c_attn(this, "c_attn", c.n_embd, 3 * c.n_embd, g, /*gather_output=*/false, c.bias, sp,
             /*stride=*/3),
      c_proj(this, "c_proj", c.n_embd, c.n_embd, g, /*input_is_parallel=*/true, c.bias, sp),
      resid_dropout(this, "resid_dropout", c.dropout),
      local_heads(c.n_head / g->size()) {}

Tensor TPGPT2Attention::forward(const Tensor& x) {
  nn::ModuleScope scope(*this);
  const Tensor qkv = c_attn(x);  // [B, T, 3 C/N]
  const auto parts = split(qkv, qkv.size(2) / 3, 2);
  const Tensor o = scaled_dot_product_attention(nn::split_heads(parts[0], local_heads),
                                                nn::split_heads(parts[1], local_heads),
                                                nn::split_heads(parts[2], local_heads), {}, true);
  return resid_dropout(c_proj(nn::merge_heads(o)));
}

TPGPT2MLP::TPGPT2MLP(Module* parent, const std::string& name, const GPT2Config& c,
                     std::shared_ptr<parallel::ProcessGroup> g, bool sp)
    : Module(parent, name),
      c_fc(this, "c_fc", c.n_embd, inner_size(c), g, /*gather_output=*/false, c.bias, sp),
      c_proj(this, "c_proj", inner_size(c), c.n_embd, g, /*input_is_parallel=*/true, c.bias, sp),
      dropout(this, "dropout", c.dropout),
      activation(c.activation) {}

Tensor TPGPT2MLP::forward(const Tensor& x) {
  nn::ModuleScope scope(*this);
  return dropout(c_proj(gelu(c_fc(x), activation)));
}

TPGPT2Block::TPGPT2Block(Module* parent, const std::string& name, const GPT2Config& c,
                         std::shared_ptr<parallel::ProcessGroup> g, bool sp)
    : Module(parent, name),
      ln_1(this, "ln_1", c.n_embd, c.layer_norm_epsilon, true, c.bias, sp ? g : nullptr),
      attn(this, "attn", c, g, sp),
      ln_2(this, "ln_2", c.n_embd, c.layer_norm_epsilon, true, c.bias, sp ? g : nullptr),
      mlp(this, "mlp", c, g, sp) {}

Tensor TPGPT2Block::forward(const Tensor& x) {
  nn::ModuleScope scope(*this);
  const Tensor h = x + attn.forward(ln_1(x));
  return h + mlp.forward(ln_2(h));
}

TPGPT2Model::TPGPT2Model(Module* parent, const std::string& name, const GPT2Config& c,
                         std::shared_ptr<parallel::ProcessGroup> g, bool sp)
    : Module(parent, name),
      wte(this, "wte", c.vocab_size, c.n_embd, g, sp),
      wpe(this, "wpe", c.n_positions, c.n_embd),
      drop(this, "drop", c.dropout),
      h(this, "h"),
      ln_f(this, "ln_f", c.n_embd, c.layer_norm_epsilon, true, c.bias, sp ? g : nullptr),
      config(c),
      sequence_parallel(sp),
      group_(g) {
  for (int64_t i = 0; i < c.n_layer; ++i) h.emplace_back<TPGPT2Block>(c, g, sp);
}

Tensor TPGPT2Model::blocks(const Tensor& x) {
  return parallel::run_layers(
      activation_checkpointing.get(), static_cast<int64_t>(h.size()),
      [this](int64_t i, const Tensor& in) {
        return h.at<TPGPT2Block>(static_cast<size_t>(i)).forward(in);
      },
      x, /*partition=*/!sequence_parallel);
}

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

Tensor TPGPT2Model::forward(const Tensor& input_ids) {
  nn::ModuleScope scope(*this);
  if (!sequence_parallel)
    return ln_f(blocks(gpt2_input_embeddings(wte, wpe, drop, input_ids, nullptr, "GPT-2")));
  // (The blocks' dropout masks: this rank's chunk of the whole sequence's too.)
  SequenceShardGuard chunk(group_->rank(), group_->size());
  return ln_f(blocks(gpt2_input_embeddings(wte, wpe, drop, input_ids, group_.get(), "GPT-2")));
}

GPT2TensorParallelLMHeadModel::GPT2TensorParallelLMHeadModel(
    const GPT2Config& c, std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel)
    : GPT2TensorParallelLMHeadModel(c, std::move(group), sequence_parallel,
                                    default_generator().state()) {}

GPT2TensorParallelLMHeadModel::GPT2TensorParallelLMHeadModel(
    const GPT2Config& c, std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel,
    GeneratorState start)
    : transformer(this, "transformer", checked(c, *group), group, sequence_parallel),
      config(c),
      padded_vocab(transformer.wte.padded_embeddings),
      group_(std::move(group)) {
  if (padded_vocab != c.vocab_size && group_->rank() == 0)
    std::cerr << "GPT-2 tensor parallel: vocab_size " << c.vocab_size << " padded to "
              << padded_vocab << " (a multiple of " << group_->size()
              << " ranks); the padding rows are left out of the loss\n";
  // The whole model's initialisation, drawn from the default generator as it was before this
  // model's layers were built (as GPT2LMHeadModel(c) would draw it), sharded: a TP run
  // starts where one process does, and the generator is left where that process leaves it.
  default_generator().set_state(start);
  GPT2LMHeadModel whole(c);
  load_from_whole(whole);
}

Tensor GPT2TensorParallelLMHeadModel::local_logits(const Tensor& input_ids) {
  nn::ModuleScope scope(*this);
  return parallel::vocab_parallel_logits(transformer.forward(input_ids), transformer.wte,
                                         transformer.sequence_parallel);
}

Tensor GPT2TensorParallelLMHeadModel::loss(const Batch& b) {
  nn::ModuleScope scope(*this);
  TS_CHECK(b.targets.defined(), "GPT-2 loss: the batch has no targets");
  TS_CHECK(b.targets.shape() == b.input_ids.shape(), "GPT-2 loss: targets ", b.targets.describe(),
           " must match input_ids ", b.input_ids.describe());
  const Tensor lg = local_logits(b.input_ids);
  const Tensor targets = b.targets.reshape({-1});
  const Tensor mean = parallel::vocab_parallel_cross_entropy(
      lg.view({-1, transformer.wte.vocab_per_rank}), targets, *group_, -100);
  if (b.target_weight == 0.0) return mean;
  const double count = b.loss_terms();
  return count == 0 ? mean * 0.0 : mean * (count * b.target_weight);
}

void GPT2TensorParallelLMHeadModel::load_from_whole(GPT2LMHeadModel& whole) {
  TS_CHECK(whole.config.to_json() == config.to_json(),
           "GPT-2 tensor parallel: load_from_whole needs a model of the same config");
  parallel::load_whole_state(*this, whole.state_dict(), group_->rank(), group_->size());
}

void GPT2TensorParallelLMHeadModel::check_divisible(const GPT2Config& c, int64_t n) {
  c.validate();
  TS_CHECK(c.n_head % n == 0, "GPT-2 tensor parallel: n_head ", c.n_head, " does not divide among ",
           n, " ranks (each rank holds whole heads)");
  TS_CHECK(inner_size(c) % n == 0, "GPT-2 tensor parallel: the MLP's ", inner_size(c),
           " features do not divide among ", n, " ranks");
}

parallel::TensorParallelLayout GPT2TensorParallelLMHeadModel::layout(const GPT2Config& c) {
  parallel::TensorParallelLayout out{{"transformer.wte.weight", {0, 1, c.vocab_size}}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    out[h + "attn.c_attn.weight"] = {0, 3, 3 * c.n_embd};
    out[h + "attn.c_proj.weight"] = {1, 1, c.n_embd};
    out[h + "mlp.c_fc.weight"] = {0, 1, inner_size(c)};
    out[h + "mlp.c_proj.weight"] = {1, 1, inner_size(c)};
    if (c.bias) {
      out[h + "attn.c_attn.bias"] = {0, 3, 3 * c.n_embd};
      out[h + "mlp.c_fc.bias"] = {0, 1, inner_size(c)};
    }
  }
  return out;
}

}  // namespace tessera::models
