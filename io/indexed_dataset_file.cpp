#include "tessera/io/indexed_dataset_file.h"

#include <cstring>
#include <limits>

#include "tessera/error.h"
#include "tessera/io/files.h"

namespace tessera::io {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, rows, documents

// DeepSpeed's dtype codes (indexed_dataset.py's `dtypes`): item bytes and signedness.
struct Dtype {
  uint8_t code;
  size_t bytes;
  bool is_signed;
};
constexpr Dtype kDtypes[] = {{1, 1, false}, {2, 1, true},  {3, 2, true},  {4, 4, true},
                             {5, 8, true},  {6, 2, false}, {7, 4, false}, {8, 8, false}};

const Dtype* find_dtype(uint8_t code) {
  for (const Dtype& d : kDtypes)
    if (d.code == code) return &d;
  return nullptr;
}

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // little-endian files on little-endian hosts
  return v;
}

int64_t load_item(const unsigned char* p, const Dtype& d, const std::string& file,
                  uint64_t offset) {
  switch (d.code) {
    case 1:
      return load<uint8_t>(p);
    case 2:
      return load<int8_t>(p);
    case 3:
      return load<int16_t>(p);
    case 4:
      return load<int32_t>(p);
    case 5:
      return load<int64_t>(p);
    case 6:
      return load<uint16_t>(p);
    case 7:
      return load<uint32_t>(p);
    default: {
      const auto v = load<uint64_t>(p);
      TS_CHECK(v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), file,
               ": the uint64 value at byte ", offset, " (", v, ") is past int64");
      return static_cast<int64_t>(v);
    }
  }
}

// The smallest dtype holding [lo, hi] (DeepSpeed's find_fit_int_dtype).
const Dtype& fit_dtype(int64_t lo, int64_t hi) {
  if (lo >= 0) {
    if (hi <= 255) return kDtypes[0];
    if (hi <= 65535) return kDtypes[5];
    if (hi <= 4294967295LL) return kDtypes[6];
    return kDtypes[7];
  }
  if (lo >= -128 && hi <= 127) return kDtypes[1];
  if (lo >= -32768 && hi <= 32767) return kDtypes[2];
  if (lo >= std::numeric_limits<int32_t>::min() && hi <= std::numeric_limits<int32_t>::max())
    return kDtypes[3];
  return kDtypes[4];
}

void put_item(std::ostream& out, int64_t v, const Dtype& d) {
  unsigned char bytes[8];
  const auto u = static_cast<uint64_t>(v);
  for (size_t i = 0; i < d.bytes; ++i) bytes[i] = static_cast<unsigned char>(u >> (8 * i));
  out.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(d.bytes));
}

template <class T>
void put(std::ostream& out, T v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace

IndexedRows read_indexed_dataset(const std::string& prefix, const std::string& what) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  const MappedFile idx(idx_path), bin(bin_path);
  const std::string idx_name = what + "'s " + quoted(idx_path);
  const unsigned char* p = idx.data();
  TS_CHECK(idx.size() >= kHeaderBytes && std::memcmp(p, kMagic, 9) == 0, idx_name,
           ": not a DeepSpeed MMapIndexedDataset index (expected the magic \"MMIDIDX\" at byte "
           "0 and a 34-byte header, found ",
           idx.size(), " bytes)");
  const auto version = load<uint64_t>(p + 9);
  TS_CHECK(version == 1, idx_name, ": version ", version, " at byte 9, expected 1");
  const Dtype* dtype = find_dtype(p[17]);
  TS_CHECK(dtype, idx_name, ": dtype code ", int(p[17]), " at byte 17 is not one of 1-8");
  const auto rows = load<uint64_t>(p + 18), documents = load<uint64_t>(p + 26);
  // sizes (4 bytes), pointers (8) per row, then 8 per document: bounded before multiplying.
  const uint64_t room = idx.size() - kHeaderBytes;
  TS_CHECK(rows <= room / 12 && documents <= (room - rows * 12) / 8, idx_name, ": ", rows,
           " rows and ", documents, " documents (bytes 18 and 26) need ", "more than its ",
           idx.size(), " bytes");
  IndexedRows out(static_cast<size_t>(rows));
  const unsigned char* sizes = p + kHeaderBytes;
  const unsigned char* pointers = sizes + rows * 4;
  for (uint64_t r = 0; r < rows; ++r) {
    const auto n = load<int32_t>(sizes + r * 4);
    const auto at = load<int64_t>(pointers + r * 8);
    const uint64_t size_at = kHeaderBytes + r * 4, pointer_at = kHeaderBytes + rows * 4 + r * 8;
    TS_CHECK(n >= 0, idx_name, ": row ", r, " has length ", n, " (byte ", size_at, ")");
    TS_CHECK(
        at >= 0 && static_cast<uint64_t>(at) <= bin.size() &&
            static_cast<uint64_t>(n) <= (bin.size() - static_cast<uint64_t>(at)) / dtype->bytes,
        idx_name, ": row ", r, " (", n, " items of ", dtype->bytes, " bytes at offset ", at,
        ", index bytes ", size_at, " and ", pointer_at, ") runs past the end of ", quoted(bin_path),
        " (", bin.size(), " bytes)");
    std::vector<int64_t>& row = out[static_cast<size_t>(r)];
    row.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      const uint64_t offset = static_cast<uint64_t>(at) + static_cast<uint64_t>(i) * dtype->bytes;
      row[static_cast<size_t>(i)] = load_item(bin.data() + offset, *dtype, bin_path, offset);
    }
  }
  return out;
}

void write_indexed_dataset(const std::string& prefix, const IndexedRows& rows) {
  int64_t lo = 0, hi = 0;
  for (const auto& row : rows)
    for (int64_t v : row) lo = std::min(lo, v), hi = std::max(hi, v);
  const Dtype& d = fit_dtype(lo, hi);
  for (const auto& row : rows)
    TS_CHECK(row.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
             "write_indexed_dataset: a row of ", row.size(), " items is past the format's int32");
  write_file_atomically(prefix + ".bin", [&](std::ostream& out) {
    for (const auto& row : rows)
      for (int64_t v : row) put_item(out, v, d);
  });
  write_file_atomically(prefix + ".idx", [&](std::ostream& out) {
    out.write(kMagic, 9);
    put<uint64_t>(out, 1);
    put<uint8_t>(out, d.code);
    put<uint64_t>(out, rows.size());
    put<uint64_t>(out, 2);  // one document: boundaries 0 and rows
    for (const auto& row : rows) put<int32_t>(out, static_cast<int32_t>(row.size()));
    int64_t at = 0;
    for (const auto& row : rows) {
      put<int64_t>(out, at);
      at += static_cast<int64_t>(row.size() * d.bytes);
    }
    put<int64_t>(out, 0);
    put<int64_t>(out, static_cast<int64_t>(rows.size()));
  });
}

}  // namespace tessera::io
