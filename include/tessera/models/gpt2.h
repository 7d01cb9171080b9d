// GPT-2 (Radford et al. 2019) as Hugging Face lays it out: pre-LayerNorm blocks, learned
// positions, tanh-GELU MLP, LM head tied to the token embedding.
//
// One definition for every layout (parallel_context.h). Over a tensor-parallel group of N
// ranks it is Megatron-LM's: each rank holds n_head/N attention heads (c_attn column-parallel
// over its heads' q, k and v rows, c_proj row-parallel), 1/N of the MLP (c_fc column-, c_proj
// row-parallel) and 1/N of the vocabulary (a vocabulary-parallel embedding tied to the LM head,
// whose loss is parallel::vocab_parallel_cross_entropy: no rank holds the whole logits).
// LayerNorms and the position embedding are replicated; every dropout sits outside the
// parallel regions, so each rank draws the mask one process draws and the model reproduces
// one process's loss and gradients, dropout included. A vocabulary that does not divide among
// the ranks is padded to a multiple of N (as Megatron does) with rows whose logits are -inf.
// sequence_parallel (Megatron-SP): LayerNorms, dropout and residual adds run on this rank's
// 1/N of the sequence (T must divide), each rank drawing its chunk of one process's masks.
// Parameter names are the same in every layout, each holding this rank's shard; the splits
// come from the layers (parallel::tensor_parallel_layout). The blocks cut into pipeline stages
// as they are (gpt2_pipeline.h).
#pragma once
#include <optional>
#include <string>

#include "tessera/models/kv_cache.h"
#include "tessera/models/moe_config.h"
#include "tessera/models/pretrained.h"
#include "tessera/models/sparse_attention.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/transformer_kernel.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/parallel_context.h"
#include "tessera/parallel/sequence_parallel.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/parallel/vocab_parallel.h"
#include "tessera/rng.h"

namespace tessera::models {

struct GPT2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0 = 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  double dropout = 0.1;  // resid, embd and attn (attention dropout is not applied: fused
                         // kernel; transformer_kernel.attn_dropout_ratio applies it)
  bool bias = true;      // Linear and LayerNorm biases (nanoGPT trains without)
  GeluApprox activation = GeluApprox::Tanh;  // HF "gelu_new"
  // DeepSpeed's sparse_attention (models/sparse_attention.h): set, each layer's attention is
  // block-sparse over its layout.
  std::optional<SparseAttention> sparse_attention;
  // `"model": {"transformer_kernel": true}` (models/transformer_kernel.h): set, each block
  // runs with the transformer kernel's options. A run's choice: config.json does not keep it.
  std::optional<nn::TransformerKernelOptions> transformer_kernel;
  // The "moe" section (models/moe_config.h): set, every expert_interval-th block's MLP is a
  // DeepSpeed MoE layer of GPT2Expert MLPs; config.json keeps it as "tessera_moe".
  std::optional<MoELayout> moe;

  // "gpt2" (124M), "gpt2-medium", "gpt2-large", "gpt2-xl", "tiny" (tests)
  static GPT2Config named(const std::string& name);
  static GPT2Config from_json(const std::string& json_text);  // HF config.json
  std::string to_json() const;
  void validate() const;
};

class GPT2Attention : public nn::Module {
 public:
  // `layer`: the block's index in the model (its sparse attention layout).
  GPT2Attention(Module* parent, const std::string& name, const GPT2Config& c,
                const parallel::ParallelContext& ctx = {}, int64_t layer = 0);
  // With a cache (one process or tensor parallel, not sequence parallel), x holds the
  // positions after cache->length and this rank's heads' keys and values are appended.
  Tensor forward(const Tensor& x, KVCache* cache, size_t layer);
  parallel::ColumnParallelLinear c_attn;  // q|k|v rows (this rank's heads')
  parallel::RowParallelLinear c_proj;
  nn::Dropout resid_dropout;
  int64_t n_head;               // this rank's
  SparseAttentionLayer sparse;  // with sparse_attention: this layer's layout, this rank's heads
  std::optional<nn::TransformerKernelOptions> kernel;  // with transformer_kernel

 private:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, KVCache* cache) const;
  int tensor_rank, tensor_ranks;  // (attention dropout draws this rank's heads' masks)
};

class GPT2MLP : public nn::Module {
 public:
  GPT2MLP(Module* parent, const std::string& name, const GPT2Config& c,
          const parallel::ParallelContext& ctx = {});
  Tensor forward(const Tensor& x);
  parallel::ColumnParallelLinear c_fc;
  parallel::RowParallelLinear c_proj;
  nn::Dropout dropout;
  GeluApprox activation;
  bool gelu_checkpoint;  // transformer_kernel's: the GELU recomputed in backward
};

// One expert of a GPT-2 MoE layer: the MLP's c_fc, GELU and c_proj, whole on its rank (the
// MLP's dropout applies to the MoE layer's combined output).
class GPT2Expert : public nn::UnaryModule {
 public:
  GPT2Expert(Module* parent, const std::string& name, const GPT2Config& c);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GPT2Expert"; }
  parallel::ColumnParallelLinear c_fc;
  parallel::RowParallelLinear c_proj;
  GeluApprox activation;
  bool gelu_checkpoint;
};

class GPT2Block : public nn::Module {
 public:
  GPT2Block(Module* parent, const std::string& name, const GPT2Config& c,
            const parallel::ParallelContext& ctx = {}, int64_t layer = 0);
  // `branch_scale`: progressive layer drop's 1 / keep probability on both residual branches.
  Tensor forward(const Tensor& x, KVCache* cache = nullptr, size_t layer = 0,
                 double branch_scale = 1.0);
  parallel::SequenceParallelLayerNorm ln_1;
  GPT2Attention attn;
  parallel::SequenceParallelLayerNorm ln_2;
  // Exactly one of the two, registered as "mlp": the dense MLP, or (a MoE layer of the "moe"
  // section) DeepSpeed's MoE with its dropout after the combine.
  std::unique_ptr<GPT2MLP> mlp;
  std::unique_ptr<parallel::MoE> moe;
  std::unique_ptr<nn::Dropout> moe_dropout;
  Tensor l_aux;  // the MoE layer's load-balancing loss of the last forward (undefined: none)

 private:
  Tensor feed_forward(const Tensor& x);
};

// GPT2Model's input embeddings, dropout(wte(ids) + wpe(positions)) of ids [B, T]. With a
// sequence group (sequence parallelism: wte reduce-scatters over it), this rank's chunk of the
// sequence: its positions and its chunk of dropout's masks. `what` names the model in errors
// (a [B, T] shape, T beyond n_positions or not dividing).
Tensor gpt2_input_embeddings(nn::UnaryModule& wte, nn::Embedding& wpe, nn::Dropout& drop,
                             const Tensor& ids, parallel::ProcessGroup* sequence_group,
                             const std::string& what);

class GPT2Model : public nn::Module {
 public:
  GPT2Model(Module* parent, const std::string& name, const GPT2Config& c,
            const parallel::ParallelContext& ctx = {});
  // Hidden states [B, T, C] (sequence parallel: [B, T/N, C], this rank's chunk).
  Tensor forward(const Tensor& input_ids, KVCache* cache = nullptr);
  parallel::VocabParallelEmbedding wte;
  nn::Embedding wpe;
  nn::Dropout drop;
  nn::ModuleList h;
  parallel::SequenceParallelLayerNorm ln_f;
  GPT2Config config;
  parallel::ParallelContext context;
  // Set: training forwards run the blocks through activation checkpoints (not with a cache;
  // partitioned over the tensor-parallel group with partition_activations, unless sequence
  // parallel).
  std::shared_ptr<parallel::ActivationCheckpointing> activation_checkpointing;
  // Set: training forwards skip and scale blocks as it chooses (progressive layer drop).
  std::shared_ptr<nn::ProgressiveLayerDrop> layer_drop;
  // Set: training forwards run its layers on their token subsets (random-LTD).
  std::shared_ptr<nn::RandomLayerTokenDrop> token_drop;
  // The MoE blocks' load-balancing losses of the last training forward, summed (through
  // activation checkpoints with their gradient; undefined: no MoE block ran).
  Tensor moe_aux_loss;

 private:
  Tensor blocks(const Tensor& x);  // through h, with activation checkpoints
};

class GPT2LMHeadModel : public PretrainedModel {
 public:
  // Tensor parallel (ctx's group of 2 or more ranks): this rank's shards of the model
  // GPT2LMHeadModel(c) would draw from the default generator at this point, which is left
  // where that one leaves it; heads and MLP features must divide among the ranks.
  explicit GPT2LMHeadModel(const GPT2Config& c, const parallel::ParallelContext& ctx = {});
  // Logits [B, T, vocab] (tensor parallel: this rank's columns [B, T, padded vocab / N], the
  // padding's -inf); with a cache, input_ids are the positions after cache->length.
  Tensor forward(const Tensor& input_ids, KVCache* cache = nullptr);

  std::string type_name() const override { return "GPT2LMHeadModel"; }
  std::string model_type() const override { return "gpt2"; }
  // Whole logits [B, T, vocab] in every layout (tensor parallel: the ranks' columns gathered).
  Tensor logits(const Batch& b) override {
    return parallel::whole_vocab_logits(forward(b.input_ids), transformer.wte);
  }
  Tensor loss(const Batch& b) override;
  // The MoE layers' load-balancing losses of the last forward, summed (undefined: no MoE).
  Tensor moe_aux_loss() const;
  std::vector<HFWeight> hf_weights() override;
  std::string hf_prefix() const override { return "transformer."; }
  bool hf_ignorable(const std::string& key) const override;
  std::string config_json() const override { return config.to_json(); }
  int64_t vocab_size() const override { return config.vocab_size; }
  int64_t context_length() const override { return config.n_positions; }
  Tensor forward_cached(const Tensor& input_ids, KVCache& cache) override {
    return parallel::whole_vocab_logits(forward(input_ids, &cache), transformer.wte);
  }
  std::unique_ptr<PretrainedModel> hf_export_model() const override;
  // GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)),
  // zero biases, unit LayerNorm weights. Uses the default generator.
  void init_weights();
  // Copies this rank's shard of every weight of `whole` (same config, one process's model).
  void load_from_whole(GPT2LMHeadModel& whole);
  void load_from_whole(PretrainedModel& whole, const std::string& source) override;
  void set_activation_checkpointing(
      std::shared_ptr<parallel::ActivationCheckpointing> checkpointing) override {
    transformer.activation_checkpointing = std::move(checkpointing);
  }
  void set_progressive_layer_drop(std::shared_ptr<nn::ProgressiveLayerDrop> drop) override {
    transformer.layer_drop = std::move(drop);
  }
  void set_random_layer_token_drop(std::shared_ptr<nn::RandomLayerTokenDrop> drop) override;
  // Throws, naming the size, when `c` does not split among `ranks` (heads, MLP features).
  static void check_divisible(const GPT2Config& c, int64_t ranks);

  GPT2Model transformer;
  GPT2Config config;

 private:
  GPT2LMHeadModel(const GPT2Config& c, const parallel::ParallelContext& ctx, GeneratorState start);
  Tensor token_loss(const Batch& b);  // the cross-entropy part of loss()
};

}  // namespace tessera::models
