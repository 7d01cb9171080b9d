// CUDA runtime queries. Always available: in a build without the CUDA backend, or on a
// machine without a GPU, cuda_device_count() is 0 and cuda_unavailable_reason() says why.
#pragma once
#include <cstdint>
#include <string>

#include "tessera/device.h"

namespace tessera {

bool cuda_compiled();
int cuda_device_count();
std::string cuda_device_name(int index);
struct CudaDeviceInfo {
  std::string name;
  int64_t total_bytes = 0;
  int capability_major = 0, capability_minor = 0, multiprocessors = 0;
};
CudaDeviceInfo cuda_device_info(int index);
std::string cuda_unavailable_reason();  // empty when a device is usable
// Throws, naming `what` (the option or key that chose the device), when `device` is a CUDA
// device this process cannot use: none is visible (and why), or its index is beyond them.
void require_usable_device(const Device& device, const std::string& what);
void cuda_synchronize();  // waits for all work on the current device
// Makes device `index` current for this thread (the dispatcher calls it before every CUDA
// kernel, so tensors on cuda:1 run on cuda:1 whatever was current before).
void cuda_set_current_device(int index);

// The caching allocator's figures for one device, in bytes (allocated = handed out to
// tensors; reserved = held from the driver, allocated plus cached free blocks).
struct CudaMemoryStats {
  int64_t allocated = 0, reserved = 0, peak_allocated = 0, peak_reserved = 0;
  int64_t device_allocations = 0;  // cudaMalloc calls so far (0 more in a steady state)
  int64_t cache_hits = 0;
};
CudaMemoryStats cuda_memory_stats(int device = 0);
void cuda_reset_peak_memory_stats(int device = 0);
void cuda_empty_cache();  // returns cached free blocks (device and pinned host) to the driver

// Pinned (page-locked) host memory held by Tensor::pin_memory/empty_pinned, in bytes.
struct CudaPinnedMemoryStats {
  int64_t allocated = 0, reserved = 0, peak_allocated = 0;
  int64_t host_allocations = 0;  // cudaHostAlloc calls so far
  int64_t cache_hits = 0;
};
CudaPinnedMemoryStats cuda_pinned_memory_stats();

// float32 matmuls on tensor cores in TF32 (10-bit mantissa): off unless asked for, as in
// torch.backends.cuda.matmul.allow_tf32; TESSERA_ALLOW_TF32=1 also turns it on.
void cuda_set_allow_tf32(bool allow);
bool cuda_allow_tf32();

// "cuBLAS 13.1.0, cuDNN 9.14.0, ..." for reports; empty without the CUDA backend.
std::string cuda_library_versions();

}  // namespace tessera
