// The model registry: every architecture a training config's "model.type" can name, registered
// once. An entry says how to build the model over a ParallelContext (whole, or a rank's
// tensor-parallel shard), how to cut it into pipeline stages, what its activations cost, and how
// to rebuild it from its config.json; launch::build, estimate-memory, the built-in trials
// (builtin:<type>), `tessera export` / `generate` (through load_pretrained) all read the same
// entry, so a registered model is available in every layout and command.
//
//   const models::RegisterModel kMine{my_model_entry()};   // one line, in the model's file
//
// GPT-2 ("gpt2") and BERT ("bert") are registered here; docs/extending.md has the recipe.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/io/train_config.h"
#include "tessera/models/activation_memory.h"
#include "tessera/models/pretrained.h"
#include "tessera/parallel/parallel_context.h"
#include "tessera/parallel/pipeline_module.h"

namespace tessera::models {

// The batches a model trains on: next-token windows (input_ids, targets shifted by one), or
// BERT's masked-LM batches (token types, attention mask, and sentence pairs with data.nsp).
enum class Objective { causal_lm, masked_lm };

// A model cut into pipeline stages: its layers (the model's own blocks, over the context's
// tensor-parallel group for 3D), the last stage's loss, each pipeline parameter's name in the
// whole model (checkpoints are saved under those), and the layer class that activation
// checkpointing wraps. `inputs` / `labels` turn a batch into the first stage's inputs and the
// loss's labels (null: {input_ids} and {targets}); `weight` is Engine::loss_weight's.
struct PipelineDefinition {
  std::vector<parallel::LayerSpec> layers;
  parallel::PipeLossFn loss;
  std::function<std::string(const std::string& pipeline_name)> whole_name;
  std::string checkpointable_layer;
  std::function<parallel::PipeValue(const Batch&)> inputs;
  std::function<parallel::PipeValue(const Batch&, double weight)> labels;
};

struct ModelEntry {
  std::string type;  // model.type, config.json's model_type, the trial entrypoint builtin:<type>
  std::string doc;   // one line: what it is
  Objective objective = Objective::causal_lm;
  // The model section's sizing keys it reads (of size, n_layer, n_head, n_embd,
  // intermediate_size, bias); a config stating another is warned about (it has no effect).
  std::vector<std::string> section_keys;

  // The config's model with fresh weights (drawn from the generator as it stands; the caller
  // seeds it), over `ctx`: whole, or this rank's tensor-parallel shard.
  std::function<std::unique_ptr<PretrainedModel>(const io::TrainConfig&, int64_t vocab,
                                                 const parallel::ParallelContext&)>
      build;
  // The model of a config.json its config_json() wrote (or Hugging Face's), fresh, over `ctx`:
  // load_pretrained, export, generate (a tensor-parallel generate: this rank's shard). `source`
  // names the file in errors.
  std::function<std::unique_ptr<PretrainedModel>(
      const std::string& config_json, const std::string& source, const parallel::ParallelContext&)>
      from_config_json;
  // The config's model as pipeline stages (null: it does not run as a pipeline).
  std::function<PipelineDefinition(const io::TrainConfig&, int64_t vocab,
                                   const parallel::ParallelContext&)>
      pipeline;
  // One micro-batch's activation bytes on a rank (estimate-memory): the whole model, and the
  // pipeline stage holding layers [first, last). Null: not estimated (reported as such).
  std::function<int64_t(const io::TrainConfig&, int64_t vocab, const ActivationPlan&)>
      activation_bytes;
  std::function<int64_t(const io::TrainConfig&, int64_t vocab, const ActivationPlan&, int64_t first,
                        int64_t last)>
      stage_activation_bytes;
};

// Adds an entry; a type registered twice, or an entry without `type` or `build`, is an error.
void register_model(ModelEntry entry);
// The entry of `type`; an unknown one is an error listing the registered types.
const ModelEntry& find_model(const std::string& type);
bool has_model(const std::string& type);
std::vector<std::string> registered_model_types();  // built-ins by name, then as registered
// The registered types for messages and help: "bert, gpt2", or with a prefix "builtin:bert,
// builtin:gpt2" (trial entrypoints), joined by `separator`.
std::string registered_model_list(const std::string& prefix = "",
                                  const std::string& separator = ", ");

// Registers at static initialisation: `const models::RegisterModel kToy{toy_entry()};`.
struct RegisterModel {
  explicit RegisterModel(ModelEntry entry) { register_model(std::move(entry)); }
};

// The config's model section against its entry: model.type must be registered (the error
// names the key and the file); sizing keys the model does not read, and masked-LM data keys
// on a causal LM, are added to cfg.warnings as having no effect.
void check_model_config(io::TrainConfig& cfg);

// model.init_from's config.json text.
std::string init_from_config_json(const io::TrainConfig& cfg);
// Pretrained embeddings have a row per id of their tokenizer: an error unless the data's
// tokenizer has as many ids.
void check_init_from_vocab(const io::TrainConfig& cfg, int64_t model_vocab, int64_t data_vocab);

}  // namespace tessera::models
