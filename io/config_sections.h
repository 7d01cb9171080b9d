// One parser per section of a training config (private to io/): DeepSpeed's sections in
// train_config.cpp, Tessera's own (model, data, train) in train_config_tessera.cpp.
#pragma once
#include "tessera/io/config_section.h"
#include "tessera/io/train_config.h"

namespace tessera::io::config {

// The whole document (TrainConfig::parse's work once the text is JSON); `recorder`, when given,
// notes every key asked for (TrainConfig::describe_keys).
TrainConfig parse_document(const json& j, int64_t world, const std::string& source,
                           ConfigKeyRecorder* recorder);

void parse_batch(Section& root, TrainConfig& c);
void parse_optimizer(Section o, TrainConfig& c);
void parse_scheduler(Section s, TrainConfig& c);
void parse_precision(Section& root, TrainConfig& c);
// DeepSpeed's torch_autocast and amp (train_config_autocast.cpp), after fp16 and bf16.
void parse_torch_autocast(Section& root, TrainConfig& c);
void parse_amp(Section& root, TrainConfig& c);
void parse_communication(Section& root, TrainConfig& c);
void parse_monitoring(Section& root, TrainConfig& c);

void parse_model(Section m, TrainConfig& c);
void parse_data(Section d, TrainConfig& c);
void parse_train(Section t, TrainConfig& c);

// The sections higher layers own (config_section_registry.cpp): each parsed from the root, or
// its defaults; then each one's rules that span sections.
void parse_registered_sections(Section& root, TrainConfig& c);
// The data-parallel size of a job of `world` ranks: divided by every registered section's ranks
// per model replica (tensor_parallel.autotp_size, pipeline.stages); an error if they do not
// divide it.
int64_t data_parallel_size(const TrainConfig& c, int64_t world);
void check_registered_sections(TrainConfig& c);

// model.init_from (train_config_init_from.cpp): the HF directory's config.json fills the
// architecture keys the model section leaves out, and a stated one that differs is an error;
// its tokenizer files become data's tokenizer unless data.tokenizer is stated, and BERT's
// data.nsp follows its architecture (`nsp_from_init`: c.data.nsp as adopt_init_from_model left
// it, before the data section was read).
void adopt_init_from_model(Section& m, TrainConfig& c);
void adopt_init_from_data(const json& data, bool nsp_from_init, TrainConfig& c);

}  // namespace tessera::io::config
