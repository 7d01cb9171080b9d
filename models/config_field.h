// Reading one optional field of an HF config.json.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/error.h"

namespace tessera::models {

// Sets `field` from j[key] when present and not null; a value of the wrong type is an error
// naming the key.
template <class T>
void read_config_field(const nlohmann::json& j, const char* key, T& field) {
  if (!j.contains(key) || j[key].is_null()) return;
  try {
    field = j[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("config.json: '", key, "' has the wrong type: ", j[key].dump());
  }
}

}  // namespace tessera::models
