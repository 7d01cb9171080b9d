// The weights of a Hugging Face model directory: model.safetensors, or the shards that
// model.safetensors.index.json maps each tensor to. Private to models/.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/io/safetensors.h"

namespace tessera::models {

class HFWeightFiles {
 public:
  explicit HFWeightFiles(const std::string& safetensors_path);  // one file
  // model.safetensors, else the index's shards; an error names what is missing or wrong.
  static HFWeightFiles from_directory(const std::string& dir);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return where_.count(name) > 0; }
  const io::SafetensorsFile& file_of(const std::string& name) const {
    return *files_[where_.at(name)];
  }

 private:
  HFWeightFiles() = default;
  std::vector<std::unique_ptr<io::SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

}  // namespace tessera::models
