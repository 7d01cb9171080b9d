// TensorBoard's event-file framing: CRC-32C against its published check value (both the
// SSE4.2 path and the table), TFRecord records whose lengths and masked CRCs verify, and the
// monitor config sections. (TensorBoard's own reader checks the files: tests/tools/
// tensorboard.sh.)
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "io/crc32c.h"
#include "tessera/error.h"
#include "tessera/io/event_file_reader.h"
#include "tessera/io/event_file_writer.h"
#include "tessera/io/train_config.h"

using namespace tessera;

TEST_CASE("CRC-32C: the check value of \"123456789\" (0xE3069283), SSE4.2 and table agree") {
  const std::string check = "123456789";
  CHECK(io::crc32c(check.data(), check.size()) == 0xE3069283u);
  CHECK(io::crc32c_table(check.data(), check.size()) == 0xE3069283u);
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes.push_back(static_cast<char>((i * 7919) & 0xFF));
  for (size_t n : {0u, 1u, 7u, 8u, 9u, 63u, 1000u}) {
    CAPTURE(n);
    CHECK(io::crc32c(bytes.data(), n) == io::crc32c_table(bytes.data(), n));
  }
  // Continuing a CRC over a split buffer equals the CRC of the whole.
  CHECK(io::crc32c(bytes.data() + 300, 700, io::crc32c(bytes.data(), 300)) ==
        io::crc32c(bytes.data(), 1000));
}

TEST_CASE("event files: TFRecord framing with masked CRC-32C") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tessera-events-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string path;
  {
    io::EventFileWriter w(dir.string());
    w.add_scalar("Train/Samples/lr", 0.0, 4);
    w.add_scalar("Train/Samples/train_loss", 2.5, 4);
    w.flush();
    path = w.path();
  }
  CHECK(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0) == 0);
  std::ifstream f(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto masked = [](const void* p, size_t n) {
    const uint32_t c = io::crc32c_table(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
  };
  size_t at = 0, records = 0;
  while (at < data.size()) {
    REQUIRE(at + 12 <= data.size());
    uint64_t length;
    uint32_t length_crc, data_crc;
    std::memcpy(&length, data.data() + at, 8);
    std::memcpy(&length_crc, data.data() + at + 8, 4);
    CHECK(length_crc == masked(data.data() + at, 8));
    REQUIRE(at + 12 + length + 4 <= data.size());
    std::memcpy(&data_crc, data.data() + at + 12 + length, 4);
    CHECK(data_crc == masked(data.data() + at + 12, length));
    at += 12 + length + 4;
    ++records;
  }
  CHECK(records == 3);  // file_version, then the two scalars
  CHECK(data.find("brain.Event:2") != std::string::npos);
  CHECK(data.find("Train/Samples/train_loss") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("monitor config: tensorboard's keys; wandb and comet are refused with a warning") {
  const auto c = io::TrainConfig::parse(R"({"train_batch_size": 2,
    "tensorboard": {"enabled": true, "output_path": "logs/", "job_name": "run1"},
    "wandb": {"enabled": true, "project": "x"}, "comet": {"enabled": false}})");
  CHECK(c.monitor("tensorboard").enabled);
  CHECK(c.monitor("tensorboard").output_path == "logs/");
  CHECK(c.monitor("tensorboard").job_name == "run1");
  bool wandb = false, comet = false;
  for (const auto& w : c.warnings) {
    wandb |= w.find("'wandb.enabled' is not supported") != std::string::npos;
    comet |= w.find("comet") != std::string::npos;
  }
  CHECK(wandb);
  CHECK(!comet);  // not enabled: nothing to say
  CHECK_THROWS_WITH_AS(io::TrainConfig::parse(R"({"train_batch_size": 2,
    "tensorboard": {"enabled": "yes"}})"),
                       doctest::Contains("'tensorboard.enabled' must be true or false"), Error);
}

TEST_CASE(
    "event files read back; a truncated last record ends the file, a bad checksum is an "
    "error naming the offset") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tessera-events-read-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string path;
  {
    io::EventFileWriter w(dir.string());
    for (int64_t k = 1; k <= 3; ++k) w.add_scalar("Train/Samples/lr", 0.25 * k, 8 * k);
    w.add_scalar("Eval/val_loss", 0.0, 24);
    w.flush();
    path = w.path();
  }
  const io::ScalarSeries s = io::read_event_scalars(path);
  REQUIRE(s.count("Train/Samples/lr") == 1);
  CHECK(s.at("Train/Samples/lr") ==
        std::vector<std::pair<int64_t, double>>{{8, 0.25}, {16, 0.5}, {24, 0.75}});
  CHECK(s.at("Eval/val_loss") == std::vector<std::pair<int64_t, double>>{{24, 0.0}});
  std::ifstream in(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const auto write = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  write(data.substr(0, data.size() - 5));  // the last record cut short
  CHECK(io::read_event_scalars(path).count("Eval/val_loss") == 0);
  CHECK(io::read_event_scalars(path).at("Train/Samples/lr").size() == 3);
  std::string bad = data;
  bad[bad.size() - 6] ^= 0x5A;  // inside the last record's data
  write(bad);
  CHECK_THROWS_WITH_AS(io::read_event_scalars(path), doctest::Contains("bad data checksum"), Error);
  std::filesystem::remove_all(dir);
}
