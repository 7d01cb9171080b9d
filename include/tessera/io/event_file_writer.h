// TensorBoard event files: scalars as TFRecord-framed Event protocol buffers, in
// DIR/events.out.tfevents.<seconds>.<host>, which `tensorboard --logdir` and its
// EventAccumulator read. Records are appended and flushed on request; a process killed
// mid-record leaves a truncated last record, which TensorBoard skips.
#pragma once
#include <cstdint>
#include <fstream>
#include <string>

namespace tessera::io {

class EventFileWriter {
 public:
  // Creates DIR (and parents) and a new event file in it; errors name the path.
  explicit EventFileWriter(const std::string& dir);
  // One scalar at `step`, stamped with the current time.
  void add_scalar(const std::string& tag, double value, int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);
  std::string path_;
  std::ofstream file_;
};

}  // namespace tessera::io
