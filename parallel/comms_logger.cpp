#include "tessera/parallel/comms_logger.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace tessera::parallel {

void CommsLogger::enable(bool on, bool verbose, std::vector<std::string> only_ops) {
  std::lock_guard<std::mutex> lock(mutex_);
  enabled_ = on;
  verbose_ = verbose;
  only_ops_ = std::move(only_ops);
}

void CommsLogger::set_listener(Listener listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  listener_ = std::move(listener);
}

void CommsLogger::record(const std::string& op, int64_t message_bytes, double bus_bytes,
                         double seconds) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (listener_) listener_(op, message_bytes, bus_bytes, seconds);
  }
  if (!enabled_) return;
  if (!only_ops_.empty() && std::find(only_ops_.begin(), only_ops_.end(), op) == only_ops_.end())
    return;
  std::lock_guard<std::mutex> lock(mutex_);
  OpStats& s = ops_[op];
  ++s.calls;
  s.message_bytes += message_bytes;
  s.bus_bytes += bus_bytes;
  s.seconds += seconds;
  if (verbose_) {
    std::fprintf(stderr, "comm op: %s | msg size: %lld B | time: %.3f ms\n", op.c_str(),
                 static_cast<long long>(message_bytes), seconds * 1e3);
  }
}

std::map<std::string, CommsLogger::OpStats> CommsLogger::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ops_;
}

void CommsLogger::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  ops_.clear();
}

std::string CommsLogger::summary(int rank, int world_size) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "comms (rank %d of %d)\n%-16s %8s %14s %14s %12s %12s\n", rank,
                world_size, "op", "calls", "msg bytes", "bus bytes", "total ms", "busbw GB/s");
  out += line;
  for (const auto& [op, s] : ops_) {
    std::snprintf(line, sizeof line, "%-16s %8lld %14lld %14.0f %12.2f %12.3f\n", op.c_str(),
                  static_cast<long long>(s.calls), static_cast<long long>(s.message_bytes),
                  s.bus_bytes, s.seconds * 1e3,
                  s.seconds > 0 ? s.bus_bytes / s.seconds / 1e9 : 0.0);
    out += line;
  }
  return out;
}

}  // namespace tessera::parallel
