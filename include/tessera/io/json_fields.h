// Typed reads from a JSON object that came from a file (a checkpoint's engine.json, a model's
// config.json): every missing key, wrong type or out-of-range value is a tessera::Error naming
// the file and the key, never a JSON library exception.
#pragma once
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::io {

class JsonFields {
 public:
  // `where` names the object in messages, e.g. "'ckpt/step10/engine.json'".
  JsonFields(const nlohmann::json& j, std::string where);
  // Parses a file's text; an invalid document is an error naming the file.
  static nlohmann::json parse_file(const std::string& path);
  // An integer that int64_t holds: nlohmann's get<int64_t>() wraps larger unsigned values
  // and is undefined for floats out of range.
  static bool is_int64(const nlohmann::json& v);

  bool has(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max()) const;
  uint64_t unsigned_integer(const std::string& key) const;
  double number(const std::string& key) const;
  std::string string(const std::string& key) const;
  bool boolean(const std::string& key) const;
  const nlohmann::json& array(const std::string& key) const;
  JsonFields object(const std::string& key) const;  // a nested object, named "where: 'key'"
  const nlohmann::json& json() const { return j_; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& at(const std::string& key) const;
  [[noreturn]] void bad(const std::string& key, const char* expected) const;
  const nlohmann::json& j_;
  std::string where_;
};

}  // namespace tessera::io
