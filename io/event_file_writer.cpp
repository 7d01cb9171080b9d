#include "tessera/io/event_file_writer.h"

#include <unistd.h>

#include <chrono>
#include <climits>
#include <filesystem>

#include "crc32c.h"
#include "tensorboard_event.pb.h"
#include "tessera/error.h"

namespace tessera::io {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TS_CHECK(!ec, "tensorboard: cannot create '", dir, "': ", ec.message());
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  path_ = (std::filesystem::path(dir) /
           ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." +
            (host[0] ? host : "localhost")))
              .string();
  file_.open(path_, std::ios::binary | std::ios::app);
  TS_CHECK(file_.good(), "tensorboard: cannot write '", path_, "'");
  tensorboard::Event first;
  first.set_wall_time(now_seconds());
  first.set_file_version("brain.Event:2");
  write_record(first.SerializeAsString());
  flush();
}

void EventFileWriter::add_scalar(const std::string& tag, double value, int64_t step) {
  tensorboard::Event e;
  e.set_wall_time(now_seconds());
  e.set_step(step);
  tensorboard::SummaryValue* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(static_cast<float>(value));
  write_record(e.SerializeAsString());
}

// TFRecord: length (uint64 LE), masked CRC-32C of the length, data, masked CRC-32C of data.
void EventFileWriter::write_record(const std::string& bytes) {
  std::string header;
  put_le(header, bytes.size(), 8);
  std::string record = header;
  put_le(record, masked_crc32c(header.data(), header.size()), 4);
  record += bytes;
  put_le(record, masked_crc32c(bytes.data(), bytes.size()), 4);
  file_.write(record.data(), static_cast<std::streamsize>(record.size()));
  TS_CHECK(file_.good(), "tensorboard: cannot write '", path_, "'");
}

void EventFileWriter::flush() {
  file_.flush();
  TS_CHECK(file_.good(), "tensorboard: cannot write '", path_, "'");
}

}  // namespace tessera::io
