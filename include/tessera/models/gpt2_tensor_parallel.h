// GPT-2 with Megatron-LM's tensor parallelism over a process group of N ranks: each rank
// holds n_head/N attention heads (c_attn column-parallel over its heads' q, k and v rows,
// c_proj row-parallel), 1/N of the MLP (c_fc column-, c_proj row-parallel) and 1/N of the
// vocabulary (a vocabulary-parallel embedding tied to the LM head, whose loss is
// parallel::vocab_parallel_cross_entropy: no rank holds the whole logits). LayerNorms and
// the position embedding are replicated. Every dropout sits outside the parallel regions, on
// activations every rank holds whole, so each rank draws the mask one process draws: the
// model reproduces GPT2LMHeadModel's loss and gradients, dropout included.
//
//   GPT2TensorParallelLMHeadModel tp(config, tp_group);
//   tp.load_from_whole(whole);   // this rank's shard of a GPT2LMHeadModel (e.g. from HF)
//
// A vocabulary that does not divide among the ranks is padded to a multiple of N (as
// Megatron does) with rows whose logits are excluded from the loss; the constructor says so.
// sequence_parallel (Megatron-SP): LayerNorms, dropout and residual adds run on this rank's
// 1/N of the sequence (which must divide among the ranks): the column-parallel layers
// all-gather it, the row-parallel ones and the embedding reduce-scatter, the LM head gathers
// it. Dropout then draws each rank's chunk of one process's mask (SequenceShardGuard), so the
// model still reproduces GPT2LMHeadModel.
//
// Parameter names are GPT2LMHeadModel's, each holding this rank's shard.
#pragma once
#include <memory>

#include "tessera/models/gpt2.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/sequence_parallel.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/parallel/tensor_parallel_layout.h"
#include "tessera/parallel/vocab_parallel.h"
#include "tessera/rng.h"

namespace tessera::models {

class TPGPT2Attention : public nn::Module {
 public:
  TPGPT2Attention(Module* parent, const std::string& name, const GPT2Config& c,
                  std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
  Tensor forward(const Tensor& x);
  parallel::ColumnParallelLinear c_attn;  // [3 C/N, C]: this rank's q, k, v rows
  parallel::RowParallelLinear c_proj;
  nn::Dropout resid_dropout;
  int64_t local_heads;
};

class TPGPT2MLP : public nn::Module {
 public:
  TPGPT2MLP(Module* parent, const std::string& name, const GPT2Config& c,
            std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
  Tensor forward(const Tensor& x);
  parallel::ColumnParallelLinear c_fc;
  parallel::RowParallelLinear c_proj;
  nn::Dropout dropout;
  GeluApprox activation;
};

class TPGPT2Block : public nn::Module {
 public:
  TPGPT2Block(Module* parent, const std::string& name, const GPT2Config& c,
              std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
  Tensor forward(const Tensor& x);
  parallel::SequenceParallelLayerNorm ln_1;
  TPGPT2Attention attn;
  parallel::SequenceParallelLayerNorm ln_2;
  TPGPT2MLP mlp;
};

class TPGPT2Model : public nn::Module {
 public:
  TPGPT2Model(Module* parent, const std::string& name, const GPT2Config& c,
              std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
  // Hidden states [B, T, C], whole on every rank (sequence_parallel: [B, T/N, C], this rank's
  // chunk of the sequence).
  Tensor forward(const Tensor& input_ids);
  parallel::VocabParallelEmbedding wte;
  nn::Embedding wpe;
  nn::Dropout drop;
  nn::ModuleList h;
  parallel::SequenceParallelLayerNorm ln_f;
  GPT2Config config;
  bool sequence_parallel;
  // Set: training forwards run the blocks through activation checkpoints (partitioned over
  // the group with partition_activations, unless sequence parallel).
  std::shared_ptr<parallel::ActivationCheckpointing> activation_checkpointing;

 private:
  Tensor blocks(const Tensor& x);  // through h, with activation checkpoints when set
  std::shared_ptr<parallel::ProcessGroup> group_;
};

// GPT2Model's input embeddings, dropout(wte(ids) + wpe(positions)) of ids [B, T] (wte whole or
// vocabulary-parallel). With a sequence group (sequence parallelism: wte reduce-scatters over
// it), this rank's chunk of the sequence: its positions and its chunk of dropout's masks.
// `what` names the model in errors (a [B, T] shape, T beyond n_positions or not dividing).
Tensor gpt2_input_embeddings(nn::UnaryModule& wte, nn::Embedding& wpe, nn::Dropout& drop,
                             const Tensor& ids, parallel::ProcessGroup* sequence_group,
                             const std::string& what);

class GPT2TensorParallelLMHeadModel : public nn::LossModel<Batch> {
 public:
  GPT2TensorParallelLMHeadModel(const GPT2Config& c, std::shared_ptr<parallel::ProcessGroup> group,
                                bool sequence_parallel = false);
  std::string type_name() const override { return "GPT2TensorParallelLMHeadModel"; }
  std::string config_json() const override { return config.to_json(); }
  // This rank's logit columns [B, T, padded_vocab / N] (padding columns are -inf).
  Tensor local_logits(const Tensor& input_ids);
  // The mean token loss (or, with target_weight, the sum times it), as GPT2LMHeadModel's.
  Tensor loss(const Batch& b) override;
  // Copies this rank's shard of every weight of `whole` (same config).
  void load_from_whole(GPT2LMHeadModel& whole);
  // How the model of config `c` is split, without building it (any number of ranks: the
  // splits name whole sizes): parallel::tensor_parallel_layout of the model, by name.
  static parallel::TensorParallelLayout layout(const GPT2Config& c);
  // Throws, naming the size, when `c` does not split among `ranks` (heads, MLP features).
  static void check_divisible(const GPT2Config& c, int64_t ranks);

  TPGPT2Model transformer;
  GPT2Config config;
  int64_t padded_vocab;

 private:
  GPT2TensorParallelLMHeadModel(const GPT2Config& c, std::shared_ptr<parallel::ProcessGroup> group,
                                bool sequence_parallel, GeneratorState start);
  std::shared_ptr<parallel::ProcessGroup> group_;
};

}  // namespace tessera::models
