// BERT with Megatron-LM's tensor parallelism over a process group of N ranks: each rank holds
// num_attention_heads/N heads (query, key and value column-parallel, attention.output.dense
// row-parallel), 1/N of the intermediate layer (intermediate.dense column-, output.dense
// row-parallel) and 1/N of the vocabulary: the word embedding (vocabulary-parallel, tied to
// the MLM decoder) and the MLM bias, so the masked-LM loss is
// parallel::vocab_parallel_cross_entropy and no rank holds whole logits. Embedding LayerNorm,
// every LayerNorm, the position and token-type embeddings, the MLM transform, the pooler and
// the next-sentence head are replicated. Every dropout acts on an activation each rank holds
// whole (after the row-parallel all-reduce), so each rank draws one process's mask: the
// model reproduces BertForPreTraining's loss and gradients, dropout included.
//
//   BertTensorParallelForPreTraining tp(config, with_nsp, tp_group);  // = BertForPreTraining's
//   init tp.load_from_whole(whole);   // this rank's shard of a BertForPreTraining (e.g. from HF)
//
// sequence_parallel (Megatron-SP): LayerNorms, dropout, residual adds and the MLM transform run
// on this rank's 1/N of the sequence (which must divide), with each rank's chunk of one
// process's dropout masks; the model still reproduces BertForPreTraining.
//
// Parameter names are BertForPreTraining's, each holding this rank's shard.
#pragma once
#include <memory>

#include "tessera/models/bert.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/sequence_parallel.h"
#include "tessera/parallel/tensor_parallel.h"
#include "tessera/parallel/vocab_parallel.h"
#include "tessera/rng.h"

namespace tessera::models {

class TPBertLayer : public nn::Module {
 public:
  TPBertLayer(Module* parent, const std::string& name, const BertConfig& c,
              std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
  Tensor forward(const Tensor& x, const Tensor& mask);

  struct SelfAttention : nn::Module {
    SelfAttention(Module* parent, const std::string& name, const BertConfig& c,
                  std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
    parallel::ColumnParallelLinear query, key, value;
  };
  struct Output : nn::Module {  // row-parallel dense -> dropout -> LayerNorm(x + residual)
    Output(Module* parent, const std::string& name, int64_t in, const BertConfig& c,
           std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
    Tensor forward(const Tensor& x, const Tensor& residual);
    parallel::RowParallelLinear dense;
    parallel::SequenceParallelLayerNorm LayerNorm;
    nn::Dropout dropout;
  };
  struct Attention : nn::Module {
    Attention(Module* parent, const std::string& name, const BertConfig& c,
              std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
    SelfAttention self;
    Output output;
  };
  struct Intermediate : nn::Module {
    Intermediate(Module* parent, const std::string& name, const BertConfig& c,
                 std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
    parallel::ColumnParallelLinear dense;
  };

  Attention attention;
  Intermediate intermediate;
  Output output;
  int64_t local_heads;
  GeluApprox activation;
};

class BertTensorParallelForPreTraining : public nn::LossModel<Batch> {
 public:
  BertTensorParallelForPreTraining(const BertConfig& c, bool with_nsp,
                                   std::shared_ptr<parallel::ProcessGroup> group,
                                   bool sequence_parallel = false);
  std::string type_name() const override { return "BertTensorParallelForPreTraining"; }
  // The whole model's HF config (export and zero-to-fp32 rebuild BertForPreTraining from it).
  std::string config_json() const override {
    return config.to_json(with_nsp ? "BertForPreTraining" : "BertForMaskedLM");
  }
  // Sequence output [B, T, H], whole on every rank (sequence_parallel: this rank's chunk).
  Tensor encode(const Batch& b);
  Tensor local_logits(const Batch& b);  // this rank's MLM logit columns (padding: -inf)
  // The MLM loss (mean, or with target_weight the sum times it), plus NSP, as BertForPreTraining.
  Tensor loss(const Batch& b) override;
  void load_from_whole(BertForPreTraining& whole);
  // How the model of config `c` is split (without building it), by parameter name.
  static parallel::TensorParallelLayout layout(const BertConfig& c);
  // Throws, naming the size, when `c` does not split among `ranks` (heads, intermediate).
  static void check_divisible(const BertConfig& c, int64_t ranks);

  struct Embeddings : nn::Module {
    Embeddings(Module* parent, const std::string& name, const BertConfig& c,
               std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
    // dropout(LayerNorm(word + position + token type)) of ids and types [B, T]: whole, or with
    // sequence parallelism this rank's chunk of the sequence (and of dropout's masks).
    Tensor forward(const Tensor& ids, const Tensor& types);
    parallel::VocabParallelEmbedding word_embeddings;
    nn::Embedding position_embeddings, token_type_embeddings;
    parallel::SequenceParallelLayerNorm LayerNorm;
    nn::Dropout dropout;
    std::shared_ptr<parallel::ProcessGroup> sequence_group;  // null without sequence parallelism
  };
  struct Bert : nn::Module {
    Bert(Module* parent, const std::string& name, const BertConfig& c, bool with_pooler,
         std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
    Embeddings embeddings;
    struct Encoder : nn::Module {
      Encoder(Module* parent, const std::string& name, const BertConfig& c,
              std::shared_ptr<parallel::ProcessGroup> group, bool sequence_parallel);
      nn::ModuleList layer;
    } encoder;
    std::unique_ptr<nn::Module> pooler;
    std::unique_ptr<nn::Linear> pooler_dense;
  } bert;
  struct Cls : nn::Module {
    Cls(Module* parent, const std::string& name, const BertConfig& c, bool with_nsp,
        const parallel::VocabParallelEmbedding& embedding,
        std::shared_ptr<parallel::ProcessGroup> sequence_group);
    // The MLM transform (replicated) and bias, split over the vocabulary as the tied word
    // embedding is (padding included).
    struct Predictions : nn::Module, parallel::TensorParallelModule {
      Predictions(Module* parent, const std::string& name, const BertConfig& c,
                  const parallel::VocabParallelEmbedding& embedding,
                  std::shared_ptr<parallel::ProcessGroup> sequence_group);
      parallel::TensorParallelLayout tensor_parallel_splits() const override;
      struct Transform : nn::Module {  // dense -> GELU -> LayerNorm, on sequence chunks with SP
        Transform(Module* parent, const std::string& name, const BertConfig& c,
                  std::shared_ptr<parallel::ProcessGroup> sequence_group);
        nn::Linear dense;
        parallel::SequenceParallelLayerNorm LayerNorm;
      } transform;
      Tensor bias;  // [padded vocabulary / N]
      int64_t vocab_size;
    } predictions;
    std::unique_ptr<nn::Linear> seq_relationship;
  } cls;
  BertConfig config;
  bool with_nsp, sequence_parallel;
  // Set: training forwards run the layers through activation checkpoints (partitioned over
  // the group with partition_activations, unless sequence parallel).
  std::shared_ptr<parallel::ActivationCheckpointing> activation_checkpointing;

 private:
  BertTensorParallelForPreTraining(const BertConfig& c, bool with_nsp,
                                   std::shared_ptr<parallel::ProcessGroup> group,
                                   bool sequence_parallel, GeneratorState start);
  Tensor mlm_logits(const Tensor& sequence_output);
  std::shared_ptr<parallel::ProcessGroup> group_;
};

}  // namespace tessera::models
