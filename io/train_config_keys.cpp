// The config reference (TrainConfig::describe_keys): the reader reads documents that state more
// sections each pass, a recorder noting every key it asks for, until no section it asks about is
// left unstated.
#include "config_sections.h"
#include "tessera/io/config_section_registry.h"
#include "tessera/optim/lr_schedule_registry.h"

namespace tessera::io {

namespace {

bool is_registry_params(const std::string& key) {
  return key.rfind("optimizer.params.", 0) == 0 || key.rfind("scheduler.params.", 0) == 0;
}

// States `key` (a dotted path) as an empty object in `doc`; false if a value is there already.
bool state_section(config::json& doc, const std::string& key) {
  config::json* at = &doc;
  size_t from = 0;
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', from)) {
    at = &(*at)[key.substr(from, dot - from)];
    from = dot + 1;
  }
  const std::string last = key.substr(from);
  if (at->contains(last)) return false;
  // A scheduler section names its type (DeepSpeed's rule): the first registered one.
  (*at)[last] = key == "scheduler" ? config::json{{"type", optim::registered_lr_schedules()[0]}}
                                   : config::json::object();
  return true;
}

}  // namespace

std::vector<config::ConfigKey> TrainConfig::describe_keys() {
  // DeepSpeed needs one batch size; the recorded defaults are the structs' all the same.
  config::json doc = {{"train_micro_batch_size_per_gpu", 1}};
  for (int pass = 0; pass < 16; ++pass) {  // (one pass per level of nesting suffices)
    config::ConfigKeyRecorder recorder;
    (void)config::parse_document(doc, 1, "the config reference", &recorder);
    bool grew = false;
    for (const std::string& key : recorder.unread_asked())
      if (!is_registry_params(key)) grew |= state_section(doc, key);
    if (grew) continue;
    // A section's line for a key it never reads: a misspelt name (tests/io reads this).
    if (const auto stray = recorder.unread_notes(); !stray.empty()) {
      std::string names;
      for (const std::string& key : stray) names += (names.empty() ? "" : ", ") + key;
      fail("TrainConfig::describe_keys: reference lines for keys no section reads: ", names);
    }
    std::vector<config::ConfigKey> keys;
    for (config::ConfigKey& k : recorder.keys()) {
      if (is_registry_params(k.key)) continue;
      if (std::string e = registered_config_key_expectation(k.key); !e.empty()) k.expected = e;
      keys.push_back(std::move(k));
    }
    return keys;
  }
  fail("TrainConfig::describe_keys: the sections nest deeper than 16 levels");
}

}  // namespace tessera::io
