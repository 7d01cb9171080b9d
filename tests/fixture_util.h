// Reading the JSON fixtures the PyTorch generators write.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/io/files.h"
#include "tessera/ops.h"

namespace tessera::test {

inline nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(io::read_text_file(path));
}

// A list of equal-length integer lists as an int64 [rows, cols] tensor.
inline Tensor int_matrix(const nlohmann::json& j) {
  std::vector<int64_t> v;
  for (const auto& row : j)
    for (const auto& x : row) v.push_back(x.get<int64_t>());
  return from_vector(v, {static_cast<int64_t>(j.size()), static_cast<int64_t>(j[0].size())});
}

}  // namespace tessera::test
