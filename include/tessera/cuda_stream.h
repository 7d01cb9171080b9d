// Streams and events. Every kernel, copy and library call of the backend runs on its device's
// compute stream, so work is ordered without host synchronisation and a freed block can be
// reused by the next allocation at once (stream-ordered reuse). Public so that code launching
// its own CUDA work beside Tessera's (the NCCL group, a user's kernels) can order itself on
// these streams; it needs the CUDA toolkit's headers (cuda_runtime.h) and the CUDA backend.
#pragma once
#include <cuda_runtime.h>

#include "tessera/device.h"

namespace tessera::cuda {

cudaStream_t compute_stream(int device);
inline cudaStream_t stream_for(Device d) {
  return compute_stream(d.index);
}
// Makes `device` current for the scope (kernels launch on the current device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// A timing event; elapsed_ms(a, b) waits for b.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  void synchronize();
  bool done() const;                      // has the recorded work finished? (never blocks)
  void block(cudaStream_t stream) const;  // later work on `stream` waits for it
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  cudaEvent_t event_ = nullptr;
};

void synchronize_stream(int device);

}  // namespace tessera::cuda
