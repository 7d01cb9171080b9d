#include "tessera/cuda_stream.h"

#include <array>
#include <mutex>

#include "cuda_check.h"

namespace tessera::cuda {

cudaStream_t compute_stream(int device) {
  static std::array<cudaStream_t, 64> streams{};
  static std::mutex mutex;
  TS_CHECK(device >= 0 && device < 64, "cuda: device index ", device, " out of range");
  std::lock_guard<std::mutex> lock(mutex);
  if (!streams[device]) {
    DeviceGuard guard(device);
    // Blocking with respect to the legacy default stream, so stray default-stream work by
    // other libraries still orders correctly with ours.
    TS_CUDA_CHECK(cudaStreamCreate(&streams[device]));
  }
  return streams[device];
}

DeviceGuard::DeviceGuard(int device) {
  TS_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) TS_CUDA_CHECK(cudaSetDevice(device));
}
DeviceGuard::~DeviceGuard() {
  int now = 0;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

Event::Event() {
  TS_CUDA_CHECK(cudaEventCreate(&event_));
}
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) {
  TS_CUDA_CHECK(cudaEventRecord(event_, stream));
}
void Event::synchronize() {
  TS_CUDA_CHECK(cudaEventSynchronize(event_));
}
bool Event::done() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  TS_CUDA_CHECK(status);
  return true;
}
void Event::block(cudaStream_t stream) const {
  TS_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}
float Event::elapsed_ms(const Event& start, const Event& end) {
  TS_CUDA_CHECK(cudaEventSynchronize(end.event_));
  float ms = 0;
  TS_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

void synchronize_stream(int device) {
  TS_CUDA_CHECK(cudaStreamSynchronize(compute_stream(device)));
}

}  // namespace tessera::cuda
