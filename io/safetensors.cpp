#include "tessera/io/safetensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tessera/ops.h"

namespace tessera::io {

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

struct FileDType {
  const char* name;
  size_t size;
  DType loads_as;
};

// Every dtype the format defines. Narrow integers widen to int32/int64; F8 decodes to float32.
const FileDType kFileDTypes[] = {
    {"BOOL", 1, DType::Bool},   {"U8", 1, DType::Int32},        {"I8", 1, DType::Int32},
    {"I16", 2, DType::Int32},   {"U16", 2, DType::Int32},       {"I32", 4, DType::Int32},
    {"U32", 4, DType::Int64},   {"I64", 8, DType::Int64},       {"U64", 8, DType::Int64},
    {"F16", 2, DType::Float16}, {"BF16", 2, DType::BFloat16},   {"F32", 4, DType::Float32},
    {"F64", 8, DType::Float64}, {"F8_E4M3", 1, DType::Float32}, {"F8_E5M2", 1, DType::Float32},
};

const FileDType* find_file_dtype(const std::string& n) {
  for (const auto& d : kFileDTypes)
    if (n == d.name) return &d;
  return nullptr;
}

const char* file_dtype_of(DType t) {
  switch (t) {
    case DType::Bool:
      return "BOOL";
    case DType::Int32:
      return "I32";
    case DType::Int64:
      return "I64";
    case DType::Float16:
      return "F16";
    case DType::BFloat16:
      return "BF16";
    case DType::Float32:
      return "F32";
    case DType::Float64:
      return "F64";
  }
  return "?";
}

float decode_f8(uint8_t v, bool e4m3) {
  const int sign = v >> 7;
  const int exp_bits = e4m3 ? 4 : 5, man_bits = e4m3 ? 3 : 2, bias = e4m3 ? 7 : 15;
  const int e = (v >> man_bits) & ((1 << exp_bits) - 1), m = v & ((1 << man_bits) - 1);
  float r;
  if (e4m3 && e == 15 && m == 7)
    r = NAN;
  else if (!e4m3 && e == 31)
    r = m ? NAN : INFINITY;
  else if (e == 0)
    r = std::ldexp(static_cast<float>(m), 1 - bias - man_bits);
  else
    r = std::ldexp(1.0f + static_cast<float>(m) / (1 << man_bits), e - bias);
  return sign ? -r : r;
}

template <class Src, class Dst>
void widen(const unsigned char* src, Dst* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    Src v;
    std::memcpy(&v, src + i * sizeof(Src), sizeof(Src));
    dst[i] = static_cast<Dst>(v);
  }
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path)
    : file_(std::make_shared<MappedFile>(path)) {
  const size_t size = file_->size();
  TS_CHECK(size >= 8, "safetensors '", path, "': file is ", size,
           " bytes, too small for the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, file_->data(), 8);  // little-endian on every platform we build for
  TS_CHECK(header_len <= kMaxHeaderBytes && header_len <= size - 8, "safetensors '", path,
           "': header length ", header_len, " at offset 0 exceeds the file (", size, " bytes)");
  data_start_ = 8 + header_len;
  const std::string header(reinterpret_cast<const char*>(file_->data()) + 8, header_len);
  TS_CHECK(!header.empty() && header[0] == '{', "safetensors '", path,
           "': header at offset 8 is not a JSON object");
  json j;
  try {
    j = json::parse(header);
  } catch (const json::exception& e) {
    fail("safetensors '", path, "': invalid JSON header (offset 8..", 8 + header_len,
         "): ", e.what());
  }
  TS_CHECK(j.is_object(), "safetensors '", path, "': header is not a JSON object");
  const size_t data_len = size - data_start_;
  for (auto& item : j.items()) {
    const std::string& name = item.key();  // (not a structured binding: the lambda uses it)
    const json& v = item.value();
    if (name == "__metadata__") {
      TS_CHECK(v.is_object(), "safetensors '", path, "': __metadata__ is not an object");
      for (auto& [k, mv] : v.items()) {
        TS_CHECK(mv.is_string(), "safetensors '", path, "': __metadata__ value for '", k,
                 "' is not a string");
        metadata_[k] = mv.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) {
      fail("safetensors '", path, "': tensor '", name, "': ", why);
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      bad("entry needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) bad("dtype is not a string");
    const FileDType* fd = find_file_dtype(v["dtype"].get<std::string>());
    if (!fd) bad("unknown dtype '" + v["dtype"].get<std::string>() + "'");
    SafetensorsEntry e;
    e.file_dtype = fd->name;
    e.dtype = fd->loads_as;
    if (!v["shape"].is_array()) bad("shape is not an array");
    // Every size is checked: the tensor's bytes as stored and as loaded (narrow types widen)
    // must fit in 63 bits, so a huge shape cannot pass as a small byte range.
    uint64_t numel = 1, stored = fd->size, loaded = itemsize(fd->loads_as);
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) bad("shape has a non-integer or negative size");
      const uint64_t s = d.get<uint64_t>();
      if (__builtin_mul_overflow(numel, s, &numel) || __builtin_mul_overflow(stored, s, &stored) ||
          __builtin_mul_overflow(loaded, s, &loaded) || loaded > (1ull << 62))
        bad("shape " + v["shape"].dump() + " is too large (its byte size overflows)");
      e.shape.push_back(static_cast<int64_t>(s));
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      bad("data_offsets must be two non-negative integers");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_len)
      bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
          "] fall outside the data section (" + std::to_string(data_len) +
          " bytes at file offset " + std::to_string(data_start_) + ")");
    if (e.end - e.begin != stored)
      bad(std::string(fd->name) + shape_str(e.shape) + " needs " + std::to_string(stored) +
          " bytes but data_offsets span " + std::to_string(e.end - e.begin));
    entries_[name] = std::move(e);
  }
  // Tensors must tile the data section exactly: no overlaps, no gaps, nothing left over.
  std::vector<std::pair<size_t, std::string>> by_offset;
  for (auto& [n, e] : entries_) by_offset.emplace_back(e.begin, n);
  std::sort(by_offset.begin(), by_offset.end(), [&](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first
                              : entries_.at(a.second).end < entries_.at(b.second).end;
  });
  size_t at = 0;
  for (auto& [begin, n] : by_offset) {
    TS_CHECK(begin == at, "safetensors '", path, "': tensor '", n, "' starts at data offset ",
             begin,
             begin < at ? " inside the previous tensor"
                        : " leaving a gap after offset " + std::to_string(at));
    at = entries_.at(n).end;
  }
  TS_CHECK(at == data_len, "safetensors '", path, "': ", data_len - at,
           " bytes after the last tensor (data ends at ", at, " of ", data_len, ")");
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (auto& [n, e] : entries_) out.push_back(n);
  return out;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  TS_CHECK(it != entries_.end(), "safetensors '", path(), "': no tensor named '", name, "'");
  return it->second;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  const unsigned char* src = file_->data() + data_start_ + e.begin;
  const int64_t n = t.numel();
  const std::string& fd = e.file_dtype;
  if (fd == "BOOL") {
    for (int64_t i = 0; i < n; ++i)
      TS_CHECK(src[i] <= 1, "safetensors '", path(), "': tensor '", name, "' has bool byte ",
               int(src[i]), " at element ", i);
    std::memcpy(t.data_ptr(), src, static_cast<size_t>(n));
  } else if (fd == "U8")
    widen<uint8_t>(src, t.data<int32_t>(), n);
  else if (fd == "I8")
    widen<int8_t>(src, t.data<int32_t>(), n);
  else if (fd == "I16")
    widen<int16_t>(src, t.data<int32_t>(), n);
  else if (fd == "U16")
    widen<uint16_t>(src, t.data<int32_t>(), n);
  else if (fd == "U32")
    widen<uint32_t>(src, t.data<int64_t>(), n);
  else if (fd == "U64") {
    for (int64_t i = 0; i < n; ++i) {
      uint64_t v;
      std::memcpy(&v, src + 8 * i, 8);
      TS_CHECK(v <= static_cast<uint64_t>(INT64_MAX), "safetensors '", path(), "': tensor '", name,
               "' element ", i, " does not fit int64");
      t.data<int64_t>()[i] = static_cast<int64_t>(v);
    }
  } else if (fd == "F8_E4M3" || fd == "F8_E5M2") {
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = decode_f8(src[i], fd == "F8_E4M3");
  } else {
    std::memcpy(t.data_ptr(), src, e.end - e.begin);
  }
  return t;
}

Tensor SafetensorsFile::get_range(const std::string& name, int64_t first, int64_t count) const {
  const SafetensorsEntry& e = entry(name);
  const size_t item = itemsize(e.dtype);
  const int64_t numel = numel_of(e.shape);
  TS_CHECK(item * static_cast<size_t>(numel) == e.end - e.begin, "safetensors '", path(),
           "': tensor '", name, "' is stored as ", e.file_dtype,
           ", which is widened on load; read it whole with get()");
  TS_CHECK(first >= 0 && count >= 0 && first <= numel && count <= numel - first, "safetensors '",
           path(), "': elements [", first, ", ", first + count, ") of tensor '", name,
           "' are out of range (it has ", numel, ")");
  Tensor t = Tensor::empty({count}, e.dtype);
  if (count > 0)
    std::memcpy(t.data_ptr(), file_->data() + data_start_ + e.begin + item * first,
                item * static_cast<size_t>(count));
  return t;
}

std::map<std::string, Tensor> load_safetensors(const std::string& path) {
  const SafetensorsFile f(path);
  std::map<std::string, Tensor> out;
  for (const std::string& n : f.names()) out[n] = f.get(n);
  return out;
}

void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  size_t offset = 0;
  for (auto& [name, t] : tensors) {
    TS_CHECK(t.defined(), "save_safetensors '", path, "': tensor '", name, "' is undefined");
    Tensor h = t.detach().to(Device::cpu()).contiguous();
    const size_t bytes = static_cast<size_t>(h.nbytes());
    header[name] = {{"dtype", file_dtype_of(h.dtype())},
                    {"shape", h.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(h);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data section starts 8-byte aligned
  write_file_atomically(path, [&](std::ostream& out) {
    const uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const Tensor& h : host)
      out.write(static_cast<const char*>(h.data_ptr()), static_cast<std::streamsize>(h.nbytes()));
  });
}

}  // namespace tessera::io
