#include "hf_weight_files.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"

namespace tessera::models {

namespace fs = std::filesystem;

HFWeightFiles::HFWeightFiles(const std::string& path) {
  files_.push_back(std::make_unique<io::SafetensorsFile>(path));
  for (const std::string& n : files_[0]->names()) where_[n] = 0;
}

std::vector<std::string> HFWeightFiles::names() const {
  std::vector<std::string> out;
  for (const auto& [n, i] : where_) out.push_back(n);
  return out;
}

HFWeightFiles HFWeightFiles::from_directory(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single) || !fs::exists(index_path)) {
    TS_CHECK(fs::exists(single), "model directory '", dir,
             "' has no model.safetensors (nor model.safetensors.index.json)",
             fs::exists(fs::path(dir) / "pytorch_model.bin")
                 ? " (pytorch_model.bin is not read: convert it to safetensors)"
                 : "");
    return HFWeightFiles(single.string());
  }
  const std::string where = io::quoted(index_path.string());
  const nlohmann::json index = io::JsonFields::parse_file(index_path.string());
  TS_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
           where, ": expected {\"weight_map\": {tensor: shard file, ...}}");
  HFWeightFiles w;
  std::map<std::string, size_t> shard_index;  // shard file name -> index into files_
  for (const auto& [name, shard] : index["weight_map"].items()) {
    TS_CHECK(shard.is_string(), where, ": weight_map['", name, "'] must be a file name, found ",
             shard.dump().substr(0, 80));
    const std::string file = shard.get<std::string>();
    // Shards sit beside the index: a path elsewhere is refused, not followed.
    TS_CHECK(!file.empty() && file.find('/') == std::string::npos && file != "." && file != "..",
             where, ": weight_map['", name, "'] is \"", file,
             "\", expected a file name in the same directory");
    auto [it, added] = shard_index.emplace(file, w.files_.size());
    if (added) {
      const fs::path p = fs::path(dir) / file;
      TS_CHECK(fs::exists(p), where, " names shard '", file, "', which is missing");
      w.files_.push_back(std::make_unique<io::SafetensorsFile>(p.string()));
    }
    TS_CHECK(w.files_[it->second]->contains(name), where, " maps '", name, "' to '", file,
             "', which does not hold it");
    w.where_[name] = it->second;
  }
  TS_CHECK(!w.files_.empty(), where, ": weight_map is empty");
  return w;
}

}  // namespace tessera::models
