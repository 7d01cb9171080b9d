// The reference of a training config's keys, recorded from the reader itself: a Section given a
// ConfigKeyRecorder notes every key its parser asks for, with the kind, the default (the value
// the parser's struct held before reading) and what a value must be. TrainConfig::describe_keys
// reads configs stating every section through it, so the reference (`tessera config-keys`,
// docs/config.md) cannot drift from what the reader accepts.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tessera::io::config {

struct ConfigKey {
  std::string key;            // its full path: "fp16.loss_scale"
  std::string kind;           // "integer", "number", "true/false", "string", "object", ...
  std::string expected;       // what a value must be (">= 1", "\"cpu\" or \"none\""); "" = any
  std::string default_value;  // as the parser's struct holds it ("" for objects)
  // What the key does (the reference's line); for a key read but not acted on, why.
  std::string note;
};

class ConfigKeyRecorder {
 public:
  // A value read as `kind`; a key read twice keeps its first default, and a concrete kind
  // replaces "JSON value" (a key first looked at raw, then read as a number).
  void read(const std::string& key, const std::string& kind, const std::string& default_value);
  void section(const std::string& key) { read(key, "object", ""); }
  void expected(const std::string& key, const std::string& text);
  // (Kept until the key is read, so a section may state its keys' lines first.)
  void note(const std::string& key, const std::string& text);
  // A key the parser only asked the presence of (a section it reads only when stated).
  void asked(const std::string& key) { asked_.insert(key); }

  // Keys asked for but never read: what the next description pass states as `{}`.
  std::vector<std::string> unread_asked() const;
  // Keys given a line but never read (a misspelt key in a section's lines).
  std::vector<std::string> unread_notes() const;
  // Every key read, in the order the parser first read them.
  std::vector<ConfigKey> keys() const { return keys_; }

 private:
  ConfigKey& entry(const std::string& key, const std::string& kind);

  std::vector<ConfigKey> keys_;
  std::map<std::string, size_t> index_;
  std::set<std::string> asked_;
  std::map<std::string, std::string> pending_notes_;  // for keys not read yet
};

}  // namespace tessera::io::config
