#include "tessera/models/model_registry.h"

#include <algorithm>
#include <filesystem>

#include "tessera/error.h"
#include "tessera/io/config_section_registry.h"
#include "tessera/io/files.h"
#include "tessera/named_registry.h"

namespace tessera::models {

ModelEntry gpt2_model_entry();  // gpt2_entry.cpp
ModelEntry bert_model_entry();  // bert_entry.cpp

namespace {

// Made on first use, the built-in models first, by name (a RegisterModel in another file may
// run before this file's statics are initialised), then the program's in registration order.
NamedRegistry<ModelEntry>& model_registry() {
  static NamedRegistry<ModelEntry> r("model type", {bert_model_entry(), gpt2_model_entry()});
  return r;
}

// (check_model_config decides model.type; the config reference says so.)
const io::DescribeConfigKey kModelTypeKey{"model.type",
                                          [] { return "one of " + registered_model_list(); }};

}  // namespace

void register_model(ModelEntry entry) {
  model_registry().add(std::move(entry), "models::register_model");
}
bool has_model(const std::string& type) {
  return model_registry().has(type);
}
const ModelEntry& find_model(const std::string& type) {
  return model_registry().find(type);
}

std::string registered_model_list(const std::string& prefix, const std::string& separator) {
  return model_registry().list(prefix, separator);
}

std::vector<std::string> registered_model_types() {
  return model_registry().types();
}

void check_model_config(io::TrainConfig& cfg) {
  const std::string& type = cfg.model.type;
  TS_CHECK(has_model(type), cfg.source, ": 'model.type' is \"", type,
           "\", expected one of: ", registered_model_list());
  const ModelEntry& e = find_model(type);
  auto warn = [&](const std::string& w) {  // (once, however often the config is checked)
    if (std::find(cfg.warnings.begin(), cfg.warnings.end(), w) == cfg.warnings.end())
      cfg.warnings.push_back(w);
  };
  auto reads = [&](const std::string& k) {
    return std::find(e.section_keys.begin(), e.section_keys.end(), k) != e.section_keys.end();
  };
  for (const char* k :
       {"size", "n_layer", "n_head", "n_embd", "intermediate_size", "bias", "transformer_kernel"}) {
    const auto& stated = cfg.model.stated_keys;
    if (!reads(k) && std::find(stated.begin(), stated.end(), k) != stated.end())
      warn(cfg.source + ": 'model." + k + "' has no effect on " + type +
           " (ignored): the model does not read it");
  }
  if (e.objective == Objective::masked_lm) return;
  for (const char* k : {"mask_prob", "nsp"}) {
    const auto& stated = cfg.data.stated_keys;
    if (std::find(stated.begin(), stated.end(), k) != stated.end())
      warn(cfg.source + ": 'data." + k + "' has no effect on " + type +
           " (ignored): it configures masked-LM batches (BERT's)");
  }
}

std::string init_from_config_json(const io::TrainConfig& cfg) {
  return io::read_text_file((std::filesystem::path(cfg.model.init_from) / "config.json").string());
}

void check_init_from_vocab(const io::TrainConfig& cfg, int64_t model_vocab, int64_t data_vocab) {
  TS_CHECK(model_vocab == data_vocab, "model.init_from: ", cfg.model.init_from,
           "/config.json has vocab_size ", model_vocab, " but the data's ", cfg.data.tokenizer,
           " tokenizer has ", data_vocab,
           " ids; train with the directory's own tokenizer (vocab.json + merges.txt or "
           "tokenizer.json there, data.tokenizer left out)",
           cfg.data.tokenizer == "wordpiece" ? " (BERT's WordPiece vocab.txt is not a training "
                                               "tokenizer yet)"
                                             : "");
}

}  // namespace tessera::models
