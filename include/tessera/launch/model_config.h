// A training config's model section as the built-in architectures' configs: GPT-2's and
// BERT's sizes from the section (or a named size), or from model.init_from's config.json.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/io/train_config.h"
#include "tessera/models/bert.h"
#include "tessera/models/gpt2.h"
#include "tessera/models/pretrained.h"

namespace tessera::launch {

// The GPT-2/BERT model a training config's "model" section describes (fresh weights), over
// `ctx` (one definition for every layout: whole without a tensor-parallel group).
std::unique_ptr<models::PretrainedModel> model_from_train_config(
    const io::TrainConfig& cfg, int64_t vocab_size, const parallel::ParallelContext& ctx = {});
// model.init_from's config.json text (the config's model section already agrees with it).
std::string init_from_config_json(const io::TrainConfig& cfg);
// The GPT-2 (BERT) architecture of the config's "model" section.
models::GPT2Config gpt2_config_from_train_config(const io::TrainConfig& cfg, int64_t vocab_size);
models::BertConfig bert_config_from_train_config(const io::TrainConfig& cfg, int64_t vocab_size);

}  // namespace tessera::launch
