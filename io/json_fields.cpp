#include "tessera/io/json_fields.h"

#include <cmath>

#include "tessera/error.h"
#include "tessera/io/files.h"

namespace tessera::io {

JsonFields::JsonFields(const nlohmann::json& j, std::string where)
    : j_(j), where_(std::move(where)) {
  TS_CHECK(j_.is_object(), where_, ": expected a JSON object, found ", j_.type_name());
}

nlohmann::json JsonFields::parse_file(const std::string& path) {
  try {
    return nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("'", path, "': invalid JSON: ", e.what());
  }
}

bool JsonFields::is_int64(const nlohmann::json& v) {
  return v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX);
}

bool JsonFields::has(const std::string& key) const {
  return j_.contains(key);
}

const nlohmann::json& JsonFields::at(const std::string& key) const {
  auto it = j_.find(key);
  TS_CHECK(it != j_.end(), where_, ": '", key, "' is missing");
  return *it;
}

void JsonFields::bad(const std::string& key, const char* expected) const {
  fail(where_, ": '", key, "' must be ", expected, ", found ", at(key).dump());
}

int64_t JsonFields::integer(const std::string& key, int64_t min, int64_t max) const {
  const nlohmann::json& v = at(key);
  if (!is_int64(v)) bad(key, "an integer");
  const int64_t x = v.get<int64_t>();
  if (x < min || x > max) {
    fail(where_, ": '", key, "' is ", x, ", expected ", min, " to ", max);
  }
  return x;
}

uint64_t JsonFields::unsigned_integer(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_number_unsigned()) bad(key, "a non-negative integer");
  return v.get<uint64_t>();
}

double JsonFields::number(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_number()) bad(key, "a number");
  return v.get<double>();
}

std::string JsonFields::string(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_string()) bad(key, "a string");
  return v.get<std::string>();
}

bool JsonFields::boolean(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_boolean()) bad(key, "true or false");
  return v.get<bool>();
}

const nlohmann::json& JsonFields::array(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_array()) bad(key, "a list");
  return v;
}

JsonFields JsonFields::object(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_object()) bad(key, "an object");
  return JsonFields(v, where_ + ": '" + key + "'");
}

}  // namespace tessera::io
