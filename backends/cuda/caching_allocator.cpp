// The device allocator: blocks freed by tensors go to a per-device cache keyed by their
// rounded size and are handed out again without cudaMalloc/cudaFree, so a steady-state
// training step makes no driver allocations. All backend work runs on the device's one
// compute stream, so a block freed on the host may be reused at once: any later kernel that
// writes it is queued after every earlier kernel that read it.
// Written here rather than taken from a library: the runtime's cudaMallocAsync pools would
// serve, but they give no per-tensor accounting and release memory on their own schedule.
#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda_check.h"
#include "pinned_allocator.h"
#include "tessera/cuda.h"
#include "tessera/cuda_stream.h"
#include "tessera/storage.h"

namespace tessera::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Rounding keeps the number of distinct sizes small so freed blocks match later requests.
size_t rounded(size_t n) {
  auto up = [](size_t v, size_t m) { return (v + m - 1) / m * m; };
  if (n < kMiB) return up(std::max<size_t>(n, 1), 512);
  if (n < 64 * kMiB) return up(n, kMiB);
  return up(n, 8 * kMiB);
}

struct Block {
  size_t size;
  int device;
};

class CachingAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, Device device) override {
    if (nbytes == 0) return DataPtr(nullptr, [](void*) {});
    const int dev = device.index;
    TS_CHECK(dev >= 0 && dev < cuda_device_count(), "cuda: device ", device.str(),
             " is not available (", cuda_device_count(), " visible)");
    const size_t size = rounded(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    PerDevice& d = per_device(dev);
    void* p = nullptr;
    auto it = d.free.find(size);
    if (it != d.free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      ++d.stats.cache_hits;
    } else {
      p = device_malloc(d, dev, size, nbytes);
      d.stats.reserved += static_cast<int64_t>(size);
      d.stats.peak_reserved = std::max(d.stats.peak_reserved, d.stats.reserved);
    }
    live_[p] = {size, dev};
    d.stats.allocated += static_cast<int64_t>(size);
    d.stats.peak_allocated = std::max(d.stats.peak_allocated, d.stats.allocated);
    return DataPtr(p, &CachingAllocator::release);
  }

  CudaMemoryStats stats(int dev) {
    std::lock_guard<std::mutex> lock(mutex_);
    return per_device(dev).stats;
  }
  void reset_peak(int dev) {
    std::lock_guard<std::mutex> lock(mutex_);
    PerDevice& d = per_device(dev);
    d.stats.peak_allocated = d.stats.allocated;
    d.stats.peak_reserved = d.stats.reserved;
  }
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t dev = 0; dev < devices_.size(); ++dev)
      free_cached(devices_[dev], static_cast<int>(dev));
  }

  static CachingAllocator& instance() {
    static CachingAllocator* a = new CachingAllocator();  // outlives static tensors at exit
    return *a;
  }

 private:
  struct PerDevice {
    std::unordered_map<size_t, std::vector<void*>> free;
    CudaMemoryStats stats;
  };

  PerDevice& per_device(int dev) {
    if (static_cast<size_t>(dev) >= devices_.size()) devices_.resize(dev + 1);
    return devices_[dev];
  }

  void* device_malloc(PerDevice& d, int dev, size_t size, size_t asked) {
    DeviceGuard guard(dev);
    void* p = nullptr;
    cudaError_t s = cudaMalloc(&p, size);
    if (s != cudaSuccess) {
      // Give the cache back to the driver and try once more before failing.
      cudaGetLastError();
      free_cached(d, dev);
      s = cudaMalloc(&p, size);
    }
    if (s != cudaSuccess) {
      cudaGetLastError();
      size_t free_b = 0, total_b = 0;
      cudaMemGetInfo(&free_b, &total_b);
      fail("cuda: out of memory on cuda:", dev, ": tried to allocate ", asked, " bytes (",
           asked / kMiB, " MiB); the device has ", free_b / kMiB, " MiB free of ", total_b / kMiB,
           " MiB; Tessera holds ", d.stats.allocated / kMiB, " MiB in tensors and ",
           (d.stats.reserved - d.stats.allocated) / kMiB, " MiB cached");
    }
    ++d.stats.device_allocations;
    return p;
  }

  void free_cached(PerDevice& d, int dev) {
    DeviceGuard guard(dev);
    cudaStreamSynchronize(compute_stream(dev));
    for (auto& [size, list] : d.free) {
      for (void* p : list) cudaFree(p);
      d.stats.reserved -= static_cast<int64_t>(size * list.size());
      list.clear();
    }
  }

  static void release(void* p) {
    if (!p) return;
    CachingAllocator& a = instance();
    std::lock_guard<std::mutex> lock(a.mutex_);
    auto it = a.live_.find(p);
    if (it == a.live_.end()) return;
    const Block b = it->second;
    a.live_.erase(it);
    PerDevice& d = a.per_device(b.device);
    d.stats.allocated -= static_cast<int64_t>(b.size);
    d.free[b.size].push_back(p);
  }

  std::mutex mutex_;
  std::vector<PerDevice> devices_;
  std::unordered_map<void*, Block> live_;
};

const bool registered = [] {
  register_allocator(DeviceType::CUDA, &CachingAllocator::instance());
  return true;
}();

}  // namespace
}  // namespace tessera::cuda

namespace tessera {

CudaMemoryStats cuda_memory_stats(int device) {
  return cuda::CachingAllocator::instance().stats(device);
}
void cuda_reset_peak_memory_stats(int device) {
  cuda::CachingAllocator::instance().reset_peak(device);
}
void cuda_empty_cache() {
  cuda::CachingAllocator::instance().empty_cache();
  cuda::empty_pinned_cache();
}

}  // namespace tessera
