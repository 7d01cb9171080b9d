#include "tessera/io/event_file_reader.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "crc32c.h"
#include "tensorboard_event.pb.h"
#include "tessera/error.h"

namespace tessera::io {

namespace {

uint64_t get_le(const std::string& data, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(data[at + static_cast<size_t>(i)]))
         << (8 * i);
  return v;
}

}  // namespace

ScalarSeries read_event_scalars(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TS_CHECK(f.good(), "event file '", path, "' cannot be read");
  const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ScalarSeries out;
  size_t at = 0;
  while (data.size() - at >= 12) {
    const uint64_t length = get_le(data, at, 8);
    TS_CHECK(get_le(data, at + 8, 4) == masked_crc32c(data.data() + at, 8), "event file '", path,
             "': bad length checksum at byte ", at);
    // A record cut short by a writer that was killed ends the file (TensorBoard's rule).
    if (length > data.size() - at - 12 || data.size() - at - 12 - length < 4) break;
    TS_CHECK(length <= 0x7fffffff, "event file '", path, "': the record at byte ", at, " claims ",
             length, " bytes");
    const char* bytes = data.data() + at + 12;
    TS_CHECK(get_le(data, at + 12 + length, 4) == masked_crc32c(bytes, length), "event file '",
             path, "': bad data checksum in the record at byte ", at);
    tensorboard::Event event;
    TS_CHECK(event.ParseFromArray(bytes, static_cast<int>(length)), "event file '", path,
             "': the record at byte ", at, " is not an Event");
    if (event.has_summary())
      for (const auto& v : event.summary().value())
        if (v.has_simple_value()) out[v.tag()].emplace_back(event.step(), v.simple_value());
    at += 12 + length + 4;
  }
  return out;
}

}  // namespace tessera::io
