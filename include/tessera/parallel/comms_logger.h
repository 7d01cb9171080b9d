// Counts every collective a process group runs: calls, bytes and time per op, as DeepSpeed's
// `comms_logger` does. Message bytes are the size of the tensor handed to the op; bus bytes
// are what each rank sends over the wire by the op's ring cost ((N-1)/N of the gathered or
// scattered size, twice that for all_reduce), the figure the ZeRO paper's volumes count.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace tessera::parallel {

class CommsLogger {
 public:
  struct OpStats {
    int64_t calls = 0;
    int64_t message_bytes = 0;
    double bus_bytes = 0;
    double seconds = 0;
  };
  void enable(bool on, bool verbose = false, std::vector<std::string> only_ops = {});
  bool enabled() const { return enabled_; }
  void record(const std::string& op, int64_t message_bytes, double bus_bytes, double seconds);
  // Told of every collective as it completes, whether the counts are enabled or not (a
  // trace), on the thread that ran it; null removes it.
  using Listener = std::function<void(const std::string& op, int64_t message_bytes,
                                      double bus_bytes, double seconds)>;
  void set_listener(Listener listener);
  std::map<std::string, OpStats> totals() const;
  void reset();
  // One line per op: calls, total message size, total and average latency, bus bandwidth.
  std::string summary(int rank, int world_size) const;

 private:
  mutable std::mutex mutex_;
  bool enabled_ = false, verbose_ = false;
  std::vector<std::string> only_ops_;
  std::map<std::string, OpStats> ops_;
  Listener listener_;
};

}  // namespace tessera::parallel
