// BERT (Devlin et al. 2019) as Hugging Face lays it out: post-LayerNorm encoder, token-type
// embeddings, attention mask, exact GELU; masked-LM and next-sentence heads.
//
// One definition for every layout (parallel_context.h). Over a tensor-parallel group of N
// ranks it is Megatron-LM's: each rank holds num_attention_heads/N heads (query, key and value
// column-parallel, attention.output.dense row-parallel), 1/N of the intermediate layer
// (intermediate.dense column-, output.dense row-parallel) and 1/N of the vocabulary: the word
// embedding (vocabulary-parallel, tied to the MLM decoder) and the MLM bias, so the masked-LM
// loss is parallel::vocab_parallel_cross_entropy and no rank holds whole logits. Every
// LayerNorm, the position and token-type embeddings, the MLM transform, the pooler and the
// next-sentence head are replicated. Every dropout acts on an activation each rank holds whole
// (after the row-parallel all-reduce), so each rank draws one process's mask: the model
// reproduces one process's loss and gradients, dropout included (the transformer kernel's
// attention dropout acts on this rank's heads and draws their part of one process's masks).
// sequence_parallel
// (Megatron-SP): LayerNorms, dropout, residual adds and the MLM transform run on this rank's
// 1/N of the sequence (which must divide), with each rank's chunk of one process's masks.
// Parameter names are the same in every layout, each holding this rank's shard.
#pragma once
#include <memory>
#include <string>

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

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double hidden_dropout_prob = 0.1;
  double layer_norm_eps = 1e-12;
  GeluApprox activation = GeluApprox::None;
  // DeepSpeed's sparse_attention (models/sparse_attention.h): set, each layer's attention is
  // block-sparse over its layout.
  std::optional<SparseAttention> sparse_attention;
  // `"model": {"transformer_kernel": true}` (models/transformer_kernel.h): set, each layer runs
  // as DeepSpeed's transformer kernel with these options. A run's choice: config.json does not
  // keep it.
  std::optional<nn::TransformerKernelOptions> transformer_kernel;
  // The "moe" section (models/moe_config.h): set, every expert_interval-th layer's feed-forward
  // part (intermediate.dense, GELU, output.dense) is a DeepSpeed MoE layer of BertExperts;
  // config.json keeps it as "tessera_moe".
  std::optional<MoELayout> moe;

  // "bert-base", "bert-large", "tiny" (tests)
  static BertConfig named(const std::string& name);
  static BertConfig from_json(const std::string& json_text);
  std::string to_json(const std::string& architecture) const;
  void validate() const;
};

class BertEmbeddings : public nn::Module {
 public:
  BertEmbeddings(Module* parent, const std::string& name, const BertConfig& c,
                 const parallel::ParallelContext& ctx = {});
  // dropout(LayerNorm(word + position + token type)) of ids and types [B, T] (types may be
  // undefined: all 0); with sequence parallelism this rank's chunk of the sequence (and of
  // dropout's masks).
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids);
  parallel::VocabParallelEmbedding word_embeddings;
  nn::Embedding position_embeddings, token_type_embeddings;
  parallel::SequenceParallelLayerNorm LayerNorm;
  nn::Dropout dropout;
  std::shared_ptr<parallel::ProcessGroup> sequence_group;  // null without sequence parallelism
};

// One expert of a BERT MoE layer: the layer's intermediate.dense, GELU and output.dense,
// whole on its rank, under the dense layer's names.
class BertExpert : public nn::UnaryModule {
 public:
  BertExpert(Module* parent, const std::string& name, const BertConfig& c);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "BertExpert"; }
  struct Dense : nn::Module {
    Dense(Module* parent, const std::string& name, int64_t in, int64_t out);
    nn::Linear dense;
  };
  Dense intermediate, output;
  GeluApprox activation;
};

class BertLayer : public nn::Module {
 public:
  // `layer`: the layer's index in the encoder (its sparse attention layout).
  BertLayer(Module* parent, const std::string& name, const BertConfig& c,
            const parallel::ParallelContext& ctx = {}, int64_t layer = 0);
  // mask: bool [B,1,1,T] or undefined. `branch_scale`: progressive layer drop's 1 / keep
  // probability on both residual branches (before their LayerNorms: BERT is post-LN).
  Tensor forward(const Tensor& x, const Tensor& mask, double branch_scale = 1.0);

  struct SelfAttention : nn::Module {
    SelfAttention(Module* parent, const std::string& name, const BertConfig& c,
                  const parallel::ParallelContext& ctx);
    parallel::ColumnParallelLinear query, key, value;
  };
  struct Output : nn::Module {  // dense -> dropout -> LayerNorm(x + residual)
    // `in` 0: no dense (a MoE layer's output: its experts hold the dense layers).
    Output(Module* parent, const std::string& name, int64_t in, const BertConfig& c,
           const parallel::ParallelContext& ctx);
    Tensor forward(const Tensor& x, const Tensor& residual, double branch_scale = 1.0);
    // LayerNorm(dropout(y) + residual): the part after dense.
    Tensor finish(const Tensor& y, const Tensor& residual, double branch_scale = 1.0);
    // forward(gelu(x)), the GELU recomputed in backward with recompute_gelu.
    Tensor forward_of_gelu(const Tensor& x, GeluApprox approximate, bool recompute_gelu,
                           const Tensor& residual, double branch_scale = 1.0);
    std::unique_ptr<parallel::RowParallelLinear> dense;  // null in a MoE layer's output
    parallel::SequenceParallelLayerNorm LayerNorm;
    nn::Dropout dropout;  // on the all-reduced (whole) output
  };
  struct Attention : nn::Module {
    Attention(Module* parent, const std::string& name, const BertConfig& c,
              const parallel::ParallelContext& ctx);
    SelfAttention self;
    Output output;
  };
  struct Intermediate : nn::Module {
    Intermediate(Module* parent, const std::string& name, const BertConfig& c,
                 const parallel::ParallelContext& ctx);
    parallel::ColumnParallelLinear dense;
  };

  Attention attention;
  // Dense layers: intermediate and output. MoE layers (the "moe" section): moe, registered as
  // "moe", and output without its dense layer (dropout, residual, LayerNorm after the combine).
  std::unique_ptr<Intermediate> intermediate;
  std::unique_ptr<parallel::MoE> moe;
  std::unique_ptr<Output> output;
  Tensor l_aux;   // the MoE layer's load-balancing loss of the last forward (undefined: none)
  int64_t heads;  // this rank's
  GeluApprox activation;
  SparseAttentionLayer sparse;  // with sparse_attention: this layer's layout, this rank's heads
  std::optional<nn::TransformerKernelOptions> kernel;  // with transformer_kernel

 private:
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) const;
  int tensor_rank, tensor_ranks;  // (attention dropout draws this rank's heads' masks)
};

// The batch's attention mask as the attention takes it: bool [B, 1, 1, T], true for real tokens
// (undefined without one); a mask not shaped like input_ids is an error.
Tensor bert_attention_mask(const Batch& b);

class BertModel : public nn::Module {
 public:
  BertModel(Module* parent, const std::string& name, const BertConfig& c, bool with_pooler,
            const parallel::ParallelContext& ctx = {});
  // Sequence output [B, T, H] (sequence parallel: [B, T/N, H], this rank's chunk).
  Tensor forward(const Batch& b);
  // tanh(dense(first token)) [B, H], on every rank (sequence parallel: rank 0's chunk holds
  // the first token; each rank gathers it, not the whole sequence).
  Tensor pool(const Tensor& sequence_output);
  BertEmbeddings embeddings;
  struct Encoder : nn::Module {
    Encoder(Module* parent, const std::string& name, const BertConfig& c,
            const parallel::ParallelContext& ctx);
    nn::ModuleList layer;
  } encoder;
  std::unique_ptr<nn::Linear> pooler_dense;  // "pooler.dense", when the model has a pooler
  std::unique_ptr<nn::Module> pooler;
  BertConfig config;
  parallel::ParallelContext context;
  // Set: training forwards run the layers through activation checkpoints (partitioned over
  // the tensor-parallel group with partition_activations, unless sequence parallel).
  std::shared_ptr<parallel::ActivationCheckpointing> activation_checkpointing;
  // Set: training forwards skip and scale layers as it chooses (progressive layer drop).
  std::shared_ptr<nn::ProgressiveLayerDrop> layer_drop;
  // Set: training forwards run its layers on their token subsets (random-LTD).
  std::shared_ptr<nn::RandomLayerTokenDrop> token_drop;
  // The MoE layers' load-balancing losses of the last training forward, summed (through
  // activation checkpoints with their gradient; undefined: no MoE layer ran).
  Tensor moe_aux_loss;
};

// The masked-LM head: transform (dense, GELU, LayerNorm; replicated, on sequence chunks with
// sequence parallelism), then logits through the tied word embedding plus a bias split over the
// vocabulary as the embedding is (padding included).
class BertLMPredictionHead : public nn::Module, public parallel::TensorParallelModule {
 public:
  BertLMPredictionHead(Module* parent, const std::string& name, const BertConfig& c,
                       const parallel::ParallelContext& ctx,
                       const parallel::VocabParallelEmbedding& word_embeddings);
  // The transform of x, then its logits [..., vocab] (tensor parallel: this rank's columns,
  // the padding's -inf).
  Tensor forward(const Tensor& x, const parallel::VocabParallelEmbedding& word_embeddings);
  parallel::TensorParallelLayout tensor_parallel_splits() const override;  // bias: vocabulary
  struct Transform : nn::Module {
    Transform(Module* parent, const std::string& name, const BertConfig& c,
              std::shared_ptr<parallel::ProcessGroup> sequence_group);
    nn::Linear dense;
    parallel::SequenceParallelLayerNorm LayerNorm;
  } transform;
  Tensor bias;  // [padded vocabulary / N]
  GeluApprox activation;
  int64_t vocab_size;
  bool split;  // over 2 or more ranks (the embedding's group)
  std::shared_ptr<parallel::ProcessGroup> sequence_group;
};

// The MLM transform, dense -> GELU -> LayerNorm, of x (with a sequence group: this rank's
// chunk, the replicated dense's gradients summed over the group).
Tensor bert_mlm_transform(BertLMPredictionHead::Transform& transform, const Tensor& x,
                          GeluApprox activation, parallel::ProcessGroup* sequence_group);
// The first token [B, H] of a sequence output (with a sequence group: gathered from rank 0's
// chunk, not the whole sequence; every rank's identical gradient taken back as its own token's).
Tensor bert_first_token(const Tensor& sequence_output, parallel::ProcessGroup* sequence_group);

// BertForMaskedLM (with_nsp = false) or BertForPreTraining (MLM + next-sentence head).
class BertForPreTraining : public PretrainedModel {
 public:
  // Tensor parallel (ctx's group of 2 or more ranks): this rank's shards of the model
  // BertForPreTraining(c, with_nsp) would draw from the default generator at this point, which
  // is left where that one leaves it; heads and intermediate features must divide.
  BertForPreTraining(const BertConfig& c, bool with_nsp, const parallel::ParallelContext& ctx = {});
  std::string type_name() const override {
    return with_nsp ? "BertForPreTraining" : "BertForMaskedLM";
  }
  std::string model_type() const override { return "bert"; }
  Tensor logits(const Batch& b) override;  // MLM logits [B, T, V], whole in every layout
  Tensor nsp_logits(const Batch& b);       // [B, 2]
  // MLM cross-entropy over targets != -100, plus the NSP loss when the model has the head and
  // the batch has next_sentence_label, plus moe.aux_loss_coef x the MoE layers' l_aux.
  Tensor loss(const Batch& b) override;
  // The MoE layers' load-balancing losses of the last forward, summed (undefined: no MoE).
  Tensor moe_aux_loss() const;
  std::vector<HFWeight> hf_weights() override;
  std::string hf_prefix() const override { return "bert."; }
  bool hf_ignorable(const std::string& key) const override;
  std::string config_json() const override { return config.to_json(type_name()); }
  int64_t vocab_size() const override { return config.vocab_size; }
  void init_weights();  // N(0, 0.02), zero biases, unit LayerNorm weights
  // Copies this rank's shard of every weight of `whole` (same config and heads, one process's).
  void load_from_whole(BertForPreTraining& whole);
  void load_from_whole(PretrainedModel& whole, const std::string& source) override;
  void set_activation_checkpointing(
      std::shared_ptr<parallel::ActivationCheckpointing> checkpointing) override {
    bert.activation_checkpointing = std::move(checkpointing);
  }
  void set_progressive_layer_drop(std::shared_ptr<nn::ProgressiveLayerDrop> drop) override {
    bert.layer_drop = std::move(drop);
  }
  void set_random_layer_token_drop(std::shared_ptr<nn::RandomLayerTokenDrop> drop) override;
  // Throws, naming the size, when `c` does not split among `ranks` (heads, intermediate).
  static void check_divisible(const BertConfig& c, int64_t ranks);

  BertModel bert;
  struct Cls : nn::Module {
    Cls(Module* parent, const std::string& name, const BertConfig& c, bool with_nsp,
        const parallel::ParallelContext& ctx,
        const parallel::VocabParallelEmbedding& word_embeddings);
    BertLMPredictionHead predictions;
    std::unique_ptr<nn::Linear> seq_relationship;
  } cls;
  BertConfig config;
  bool with_nsp;

 private:
  BertForPreTraining(const BertConfig& c, bool with_nsp, const parallel::ParallelContext& ctx,
                     GeneratorState start);
};

}  // namespace tessera::models
