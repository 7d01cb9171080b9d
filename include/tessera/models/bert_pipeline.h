// BERT pretraining as a pipeline (DeepSpeed's PipelineModule): layer 0 the embeddings (tied,
// key "embed", with the masked-LM decoder), layers 1..L the encoder layers, then the heads'
// transform and pooler with the next-sentence classifier, the tied decoder, and the decoder's
// bias. Values passed on: {hidden [B, T, H], attention mask bool [B, 1, 1, T]}, then {MLM
// logits, NSP logits}.
//
//   inputs: {input_ids, token_type_ids, attention_mask}   (bert_pipeline_inputs)
//   labels: {targets, next_sentence_label (or undefined), weight [1] float64}
//
// The layers run BertForPreTraining's ops in its order (dropouts included), so a pipeline
// trains as the whole model does; weight is Engine::loss_weight's (0: mean over targets).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/models/bert.h"
#include "tessera/parallel/pipeline_module.h"

namespace tessera::models {

// The layers are BertForPreTraining's own (BertEmbeddings, BertLayer). With `tp` (a
// tensor-parallel group of 2 or more ranks: 3D), each is built over it as the model is, under
// the same names (the word embedding, its tied decoder and the decoder's bias split over the
// vocabulary), starting at zero: load the whole model with load_saved_state(state, tp->rank(),
// tp->size()); the loss is then vocabulary-parallel. sequence_parallel (with `tp`,
// Megatron-SP): stages pass each rank's chunk of the sequence (T must divide), as the model's
// sequence parallelism.
std::vector<parallel::LayerSpec> bert_pipeline_layers(
    const BertConfig& c, bool with_nsp, std::shared_ptr<parallel::ProcessGroup> tp = nullptr,
    bool sequence_parallel = false);
parallel::PipeLossFn bert_pipeline_loss(std::shared_ptr<parallel::ProcessGroup> tp = nullptr);
// The pipeline's inputs from a batch (token types 0 and a full mask where the batch has none).
parallel::PipeValue bert_pipeline_inputs(const Batch& b);
parallel::PipeValue bert_pipeline_labels(const Batch& b, double weight);
// "3.layer.attention.self.query.weight" -> "bert.encoder.layer.2.attention.self.query.weight".
std::string bert_name_of_pipeline_parameter(const std::string& name, int64_t num_layers);

}  // namespace tessera::models
