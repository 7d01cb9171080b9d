#include "tessera/io/config_key.h"

namespace tessera::io::config {

ConfigKey& ConfigKeyRecorder::entry(const std::string& key, const std::string& kind) {
  const auto it = index_.find(key);
  if (it != index_.end()) return keys_[it->second];
  index_[key] = keys_.size();
  keys_.push_back(ConfigKey{key, kind, "", "", ""});
  return keys_.back();
}

void ConfigKeyRecorder::read(const std::string& key, const std::string& kind,
                             const std::string& default_value) {
  const bool known = index_.count(key) != 0;
  ConfigKey& k = entry(key, kind);
  if (!known) k.default_value = default_value;
  if (k.kind == "JSON value" && kind != "JSON value") {
    k.kind = kind;
    if (k.default_value.empty()) k.default_value = default_value;
  }
}

void ConfigKeyRecorder::expected(const std::string& key, const std::string& text) {
  ConfigKey& k = entry(key, "JSON value");
  if (k.expected.empty()) k.expected = text;
}

void ConfigKeyRecorder::note(const std::string& key, const std::string& text) {
  entry(key, "JSON value").note = text;
}

std::vector<std::string> ConfigKeyRecorder::unread_asked() const {
  std::vector<std::string> out;
  for (const std::string& k : asked_)
    if (!index_.count(k)) out.push_back(k);
  return out;
}

}  // namespace tessera::io::config
