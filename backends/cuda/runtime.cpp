// Device queries and the device allocator. A simple cudaMalloc-backed allocator for now;
// the caching allocator is tracked by the CUDA-backend issue.
#include <cuda_runtime.h>

#include "backends/cuda/cuda_check.h"
#include "tessera/cuda.h"
#include "tessera/storage.h"

namespace tessera {

bool cuda_compiled() {
  return true;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status
    return 0;
  }
  return n;
}

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t s = cudaGetDeviceCount(&n);
  if (s != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(s);
  }
  return n > 0 ? "" : "no CUDA device visible";
}

void cuda_synchronize() {
  TS_CUDA_CHECK(cudaDeviceSynchronize());
}

std::string cuda_device_name(int index) {
  cudaDeviceProp prop{};
  TS_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

namespace cuda {
namespace {

class DeviceAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, Device device) override {
    TS_CHECK(device.index < cuda_device_count(), "cuda: device ", device.str(),
             " is not available (", cuda_device_count(), " visible)");
    TS_CUDA_CHECK(cudaSetDevice(device.index));
    void* p = nullptr;
    if (nbytes > 0) {
      const cudaError_t s = cudaMalloc(&p, nbytes);
      if (s != cudaSuccess) {
        size_t free_b = 0, total_b = 0;
        cudaGetLastError();
        cudaMemGetInfo(&free_b, &total_b);
        fail("cuda: out of memory on ", device.str(), ": asked for ", nbytes, " bytes, ", free_b,
             " of ", total_b, " bytes free");
      }
    }
    return DataPtr(p, [](void* q) {
      if (q) cudaFree(q);
    });
  }
};

const bool registered = [] {
  static DeviceAllocator allocator;
  register_allocator(DeviceType::CUDA, &allocator);
  return true;
}();

}  // namespace
}  // namespace cuda
}  // namespace tessera
