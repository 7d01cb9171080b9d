// BERT (Devlin et al. 2019) as Hugging Face lays it out: post-LayerNorm encoder, token-type
// embeddings, attention mask, exact GELU; masked-LM and next-sentence heads.
#pragma once
#include <memory>
#include <string>

#include "tessera/models/pretrained.h"
#include "tessera/nn/layers.h"
#include "tessera/parallel/activation_checkpointing.h"

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

  // "bert-base", "bert-large", "tiny" (tests)
  static BertConfig named(const std::string& name);
  static BertConfig from_json(const std::string& json_text);
  std::string to_json(const std::string& architecture) const;
  void validate() const;
};

class BertEmbeddings : public nn::Module {
 public:
  BertEmbeddings(Module* parent, const std::string& name, const BertConfig& c);
  Tensor forward(const Tensor& input_ids, const Tensor& token_type_ids);
  nn::Embedding word_embeddings, position_embeddings, token_type_embeddings;
  nn::LayerNorm LayerNorm;
  nn::Dropout dropout;
};

class BertLayer : public nn::Module {
 public:
  BertLayer(Module* parent, const std::string& name, const BertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& mask);  // mask: bool [B,1,1,T] or undefined

  struct SelfAttention : nn::Module {
    SelfAttention(Module* parent, const std::string& name, const BertConfig& c);
    nn::Linear query, key, value;
  };
  struct Output : nn::Module {  // dense -> dropout -> LayerNorm(x + residual)
    Output(Module* parent, const std::string& name, int64_t in, const BertConfig& c);
    Tensor forward(const Tensor& x, const Tensor& residual);
    nn::Linear dense;
    nn::LayerNorm LayerNorm;
    nn::Dropout dropout;
  };
  struct Attention : nn::Module {
    Attention(Module* parent, const std::string& name, const BertConfig& c);
    SelfAttention self;
    Output output;
  };
  struct Intermediate : nn::Module {
    Intermediate(Module* parent, const std::string& name, const BertConfig& c);
    nn::Linear dense;
  };

  Attention attention;
  Intermediate intermediate;
  Output output;
  int64_t heads;
  GeluApprox activation;
};

// The batch's attention mask as the attention takes it: bool [B, 1, 1, T], true for real tokens
// (undefined without one); a mask not shaped like input_ids is an error.
Tensor bert_attention_mask(const Batch& b);

class BertModel : public nn::Module {
 public:
  BertModel(Module* parent, const std::string& name, const BertConfig& c, bool with_pooler);
  Tensor forward(const Batch& b);              // sequence output [B, T, H]
  Tensor pool(const Tensor& sequence_output);  // tanh(dense(first token))
  BertEmbeddings embeddings;
  struct Encoder : nn::Module {
    Encoder(Module* parent, const std::string& name, const BertConfig& c);
    nn::ModuleList layer;
  } encoder;
  std::unique_ptr<nn::Linear> pooler_dense;  // "pooler.dense", when the model has a pooler
  std::unique_ptr<nn::Module> pooler;
  BertConfig config;
  // Set: training forwards run the layers through activation checkpoints.
  std::shared_ptr<parallel::ActivationCheckpointing> activation_checkpointing;
};

// The masked-LM head: transform (dense, GELU, LayerNorm), then logits through the tied word
// embedding plus a bias.
class BertLMPredictionHead : public nn::Module {
 public:
  BertLMPredictionHead(Module* parent, const std::string& name, const BertConfig& c);
  Tensor forward(const Tensor& x, const Tensor& word_embeddings);
  struct Transform : nn::Module {
    Transform(Module* parent, const std::string& name, const BertConfig& c);
    nn::Linear dense;
    nn::LayerNorm LayerNorm;
  } transform;
  Tensor bias;
  GeluApprox activation;
};

// BertForMaskedLM (with_nsp = false) or BertForPreTraining (MLM + next-sentence head).
class BertForPreTraining : public PretrainedModel {
 public:
  BertForPreTraining(const BertConfig& c, bool with_nsp);
  std::string type_name() const override {
    return with_nsp ? "BertForPreTraining" : "BertForMaskedLM";
  }
  std::string model_type() const override { return "bert"; }
  Tensor logits(const Batch& b) override;  // MLM logits [B, T, V]
  Tensor nsp_logits(const Batch& b);       // [B, 2]
  // MLM cross-entropy over targets != -100, plus the NSP loss when the model has the head and
  // the batch has next_sentence_label.
  Tensor loss(const Batch& b) override;
  std::vector<HFWeight> hf_weights() override;
  std::string hf_prefix() const override { return "bert."; }
  bool hf_ignorable(const std::string& key) const override;
  std::string config_json() const override { return config.to_json(type_name()); }
  int64_t vocab_size() const override { return config.vocab_size; }
  void init_weights();  // N(0, 0.02), zero biases, unit LayerNorm weights

  BertModel bert;
  struct Cls : nn::Module {
    Cls(Module* parent, const std::string& name, const BertConfig& c, bool with_nsp);
    BertLMPredictionHead predictions;
    std::unique_ptr<nn::Linear> seq_relationship;
  } cls;
  BertConfig config;
  bool with_nsp;
};

}  // namespace tessera::models
