// Hugging Face safetensors: an 8-byte little-endian header length, a JSON header mapping
// each tensor name to {dtype, shape, data_offsets}, then the raw little-endian data.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/io/files.h"
#include "tessera/tensor.h"

namespace tessera::io {

struct SafetensorsEntry {
  std::string file_dtype;  // "F32", "BF16", "U8", ...
  DType dtype;             // what it loads as (narrow integer types widen, F8 to float32)
  Shape shape;
  size_t begin = 0, end = 0;  // byte offsets within the data section
};

// A validated, memory-mapped safetensors file. Every structural problem (short file, bad
// header length, invalid JSON, unknown dtype, offsets outside the data or overlapping, sizes
// that disagree with shapes) is an error naming the file and, where there is one, the tensor.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return file_->path(); }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  Tensor get(const std::string& name) const;  // a new CPU tensor holding a copy
  // Elements [first, first + count) of the flattened tensor, copied: only those bytes of the
  // file are read. For tensors stored in a dtype Tessera holds as is (F16/BF16/F32/F64/I32/
  // I64/BOOL).
  Tensor get_range(const std::string& name, int64_t first, int64_t count) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::shared_ptr<MappedFile> file_;
  size_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

std::map<std::string, Tensor> load_safetensors(const std::string& path);

// Writes tensors (any device; copied to CPU, made contiguous) atomically, with the data
// section 8-byte aligned. dtypes: bool, int32, int64, float16, bfloat16, float32, float64.
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace tessera::io
