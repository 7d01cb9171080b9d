// GPT-2 as a pipeline (DeepSpeed's PipelineModule): layer 0 the embeddings, layers
// 1..n_layer the blocks, then the final LayerNorm and the LM head, which reuses the
// embedding through a TiedLayerSpec (key "embed"), so the first and last stages hold a copy
// each and the engine sums their gradients.
//
//   auto specs = models::gpt2_pipeline_layers(config);
//   parallel::PipelineModule model(specs, models::gpt2_pipeline_loss(), stage, options);
//   model.set_saved_names([&](const std::string& n) {
//     return models::gpt2_name_of_pipeline_parameter(n, config.n_layer);
//   });
//   model.load_saved_state(whole.state_dict());  // e.g. GPT2LMHeadModel(config)'s start
//
// The layers run the ops GPT2LMHeadModel runs, in its order (its dropouts included), so a
// pipeline trains exactly as the whole model does. Parameter names: "tied_modules.embed.wte
// .weight", "<i>.h.<block's names>" (block i - 1), "<n_layer + 1>.ln_f.weight";
// gpt2_name_of_pipeline_parameter gives the whole model's name.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/models/gpt2.h"
#include "tessera/parallel/pipeline_module.h"

namespace tessera::models {

// The blocks are GPT2LMHeadModel's own (GPT2Block). With `tp` (a tensor-parallel group of 2 or
// more ranks: 3D), each layer is built over it as the model is (vocabulary-parallel embedding
// and tied head, column/row-parallel blocks) under the same names, each rank holding its shard;
// they start at zero: load the whole model's weights with load_saved_state(state, tp->rank(),
// tp->size()). sequence_parallel (with `tp`, Megatron-SP): stages pass each rank's chunk of the
// sequence ([B, T / N, C]; T must divide), LayerNorms, dropout and residual adds run on it, and
// every dropout mask is that chunk of one process's.
std::vector<parallel::LayerSpec> gpt2_pipeline_layers(
    const GPT2Config& c, std::shared_ptr<parallel::ProcessGroup> tp = nullptr,
    bool sequence_parallel = false);
// Mean cross entropy of the logits against labels {targets} (-100: no loss), as
// GPT2LMHeadModel::loss; with `tp`, vocabulary-parallel over this rank's logit columns.
parallel::PipeLossFn gpt2_pipeline_loss(std::shared_ptr<parallel::ProcessGroup> tp = nullptr);
// "3.h.attn.c_attn.weight" -> "transformer.h.2.attn.c_attn.weight"; errors on other names.
std::string gpt2_name_of_pipeline_parameter(const std::string& name, int64_t n_layer);

}  // namespace tessera::models
