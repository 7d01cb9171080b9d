// What the built-in models share: a batch format, a loss, and the mapping between their
// parameter names and Hugging Face's, used to load and save HF model directories
// (config.json + model.safetensors).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/models/kv_cache.h"
#include "tessera/nn/loss_model.h"
#include "tessera/nn/progressive_layer_drop.h"
#include "tessera/nn/random_ltd.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/parallel_context.h"

namespace tessera::models {

// Token batches. targets are aligned with input_ids (already shifted for causal LMs);
// -100 marks positions without a loss, as in HF's labels.
struct Batch {
  Tensor input_ids;            // int64 [B, T]
  Tensor targets;              // int64 [B, T] (optional for logits only)
  Tensor attention_mask;       // [B, T], 1 = real token (BERT; optional)
  Tensor token_type_ids;       // int64 [B, T] (BERT; optional)
  Tensor next_sentence_label;  // int64 [B] (BERT pretraining; optional)
  // 0: the token loss is the mean over this batch's targets. Otherwise the token losses are
  // summed and multiplied by it: data parallelism sets N / (all ranks' targets) where ranks
  // hold different numbers of targets (BERT's masked positions, ignored targets), so the
  // ranks' averaged gradients are those of the mean over every target of the global batch,
  // as one process computes it (and a rank with no targets contributes exactly 0).
  double target_weight = 0.0;

  // The same batch with every tensor on `device` (samplers produce host tensors).
  Batch to(Device device) const;
  // The batch cut to its first `positions` positions (curriculum_learning's sequence length;
  // the batch itself when it is no longer). Every [B, T] tensor is cut alike.
  Batch first_positions(int64_t positions) const;
  // The targets that are not -100 (the engine's data-parallel weighting, nn/loss_model.h).
  int64_t loss_terms() const;
  // A mean token loss of this batch weighted as target_weight asks: the mean itself when it is
  // 0, else the sum the mean stands for times target_weight (exactly 0 without targets, where
  // the mean is NaN). For losses that come as a mean (vocabulary-parallel cross-entropy).
  Tensor weighted(const Tensor& mean) const;
};

// A batch from a JSON file: {"input_ids": [[...]], "targets": [[...]], and BERT's
// "attention_mask", "token_type_ids", "next_sentence_label"}; errors name the file and field.
Batch read_batch_json(const std::string& path);

// One parameter's name in Tessera and in HF's files. `transpose`: HF stores it as [in, out]
// (GPT-2's Conv1D) while Tessera's Linear is [out, in].
struct HFWeight {
  std::string ours;
  std::string hf;
  bool transpose = false;
};

class PretrainedModel : public nn::LossModel<Batch> {
 public:
  using nn::LossModel<Batch>::LossModel;
  virtual std::string model_type() const = 0;     // "gpt2", "bert"
  virtual Tensor logits(const Batch& batch) = 0;  // [B, T, V]
  virtual std::vector<HFWeight> hf_weights() = 0;
  virtual std::string hf_prefix() const = 0;  // "transformer." / "bert."
  // HF keys that may appear in files and carry nothing to load (buffers, tied copies).
  virtual bool hf_ignorable(const std::string& key) const = 0;
  std::string config_json() const override = 0;  // HF config.json text
  virtual int64_t vocab_size() const = 0;

  // Causal language models generate (models/generate.h): the longest sequence they take (0:
  // the model does not generate, as BERT), and the logits [B, T, V] of input_ids that follow
  // the positions `cache` holds.
  virtual int64_t context_length() const { return 0; }
  virtual Tensor forward_cached(const Tensor& input_ids, KVCache& cache);
  // A zero-initialised model of the architecture HF's class for this one loads without
  // missing keys (GPT-2 always has biases: a bias-free GPT-2 exports with zero biases); null
  // when this model already is that architecture.
  virtual std::unique_ptr<PretrainedModel> hf_export_model() const { return nullptr; }

  // One definition for every layout (parallel/parallel_context.h). Copies this rank's shard of
  // every weight of `whole`, a one-process model of the same architecture and config (what
  // `source` names, in the error when it is not).
  virtual void load_from_whole(PretrainedModel& whole, const std::string& source) = 0;
  // Training forwards run the blocks through `checkpointing` (null: straight through).
  virtual void set_activation_checkpointing(
      std::shared_ptr<parallel::ActivationCheckpointing> checkpointing) = 0;
  // Training forwards skip and scale layers as `layer_drop` chooses (null: every layer runs).
  // A model without layers to drop refuses it, naming itself.
  virtual void set_progressive_layer_drop(std::shared_ptr<nn::ProgressiveLayerDrop> layer_drop);
  // Training forwards run the layers `token_drop` names on its token subsets (null: every
  // token). A model without such layers refuses it, naming itself.
  virtual void set_random_layer_token_drop(std::shared_ptr<nn::RandomLayerTokenDrop> token_drop);
};

// random-LTD's token subsets need layers that see the whole sequence: not block-sparse
// attention (its layouts cover the whole sequence), not sequence parallel chunks. Throws,
// naming `model` and the reason.
void check_token_drop_layout(const std::string& model, bool sparse_attention,
                             bool sequence_parallel);

// Loads an HF model directory: config.json picks the architecture ("model_type" gpt2 or
// bert; BERT's "architectures" picks MaskedLM or PreTraining), model.safetensors the weights.
// Keys are accepted with or without the base-model prefix. Errors name the directory, file
// and key. `file_key_of`, when given, receives each parameter's key as found in the file.
std::unique_ptr<PretrainedModel> load_pretrained(
    const std::string& dir, std::map<std::string, std::string>* file_key_of = nullptr);

// An untrained model of the architecture an HF config.json describes (source names it),
// over `ctx` (whole without a tensor-parallel group).
std::unique_ptr<PretrainedModel> model_from_hf_config(const std::string& config_json_text,
                                                      const std::string& source,
                                                      const parallel::ParallelContext& ctx = {});

// This rank's tensor-parallel shard, over ctx's group, of the model in HF directory `dir` (the
// whole model is read, and its shards kept): tensor-parallel inference. Without a group of 2 or
// more ranks, load_pretrained(dir).
std::unique_ptr<PretrainedModel> load_pretrained_shard(const std::string& dir,
                                                       const parallel::ParallelContext& ctx);

// Copies the weights of an HF safetensors file into `model` (strict: every parameter must be
// present and every key known).
void load_hf_weights(PretrainedModel& model, const std::string& safetensors_path,
                     std::map<std::string, std::string>* file_key_of = nullptr);

// Copies the weights of an HF model directory (model.safetensors, or the shards its
// model.safetensors.index.json maps) into `model`, built for that directory's config.json:
// load_pretrained without a second model (strict likewise).
void load_hf_directory_weights(PretrainedModel& model, const std::string& dir);

// Tessera-named tensors (named_parameters' names) under HF's names and layouts (GPT-2's
// Conv1D weights transposed), for every weight the model maps; `source` names the map in
// the error for a missing one.
std::map<std::string, Tensor> to_hf_layout(PretrainedModel& model,
                                           const std::map<std::string, Tensor>& ours,
                                           const std::string& source);

// Writes config.json and model.safetensors in HF's layout (atomically, each file).
void save_pretrained(PretrainedModel& model, const std::string& dir);

}  // namespace tessera::models
