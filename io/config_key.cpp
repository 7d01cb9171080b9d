#include "tessera/io/config_key.h"

namespace tessera::io::config {

ConfigKey& ConfigKeyRecorder::entry(const std::string& key, const std::string& kind) {
  const auto it = index_.find(key);
  if (it != index_.end()) return keys_[it->second];
  index_[key] = keys_.size();
  keys_.push_back(ConfigKey{key, kind, "", "", ""});
  if (auto note = pending_notes_.find(key); note != pending_notes_.end()) {
    keys_.back().note = note->second;
    pending_notes_.erase(note);
  }
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
  if (auto it = index_.find(key); it != index_.end())
    keys_[it->second].note = text;
  else
    pending_notes_[key] = text;
}

std::vector<std::string> ConfigKeyRecorder::unread_notes() const {
  std::vector<std::string> out;
  for (const auto& pending : pending_notes_) out.push_back(pending.first);
  return out;
}

std::vector<std::string> ConfigKeyRecorder::unread_asked() const {
  std::vector<std::string> out;
  for (const std::string& k : asked_)
    if (!index_.count(k)) out.push_back(k);
  return out;
}

}  // namespace tessera::io::config
