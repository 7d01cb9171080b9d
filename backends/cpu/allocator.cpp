// Host memory: 64-byte aligned blocks, cached by exact size. A training step allocates the
// same sizes every iteration; reusing warm blocks avoids page faults and the kernel zeroing
// fresh pages (measured: 512^3 matmul went from ~0.75x to ~1x of a raw sgemm call).
// Blocks of kMappedBytes or more are mapped from the kernel directly and unmapped when freed:
// through malloc, once glibc has seen one such block freed it serves blocks up to 32 MB from
// its heap, which keeps freed memory (state swapped to disk stayed in the process: a
// ZeRO-Infinity run's peak RSS fell by 32 MB of the 148 MB swapped out, and by 145 MB mapped).
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_map>

#include "tessera/error.h"
#include "tessera/storage.h"

namespace tessera::cpu {
namespace {

constexpr size_t kMaxCachedBytes = size_t{2} << 30;
constexpr size_t kMappedBytes = size_t{256} << 10;

void* allocate_block(size_t bytes) {
  if (bytes < kMappedBytes) return std::aligned_alloc(64, bytes);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void free_block(void* p, size_t bytes) {
  if (bytes < kMappedBytes)
    std::free(p);
  else
    munmap(p, bytes);
}

class CachingHostAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, Device) override {
    const size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = free_.find(rounded);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        cached_bytes_ -= rounded;
        sizes_[p] = rounded;
        count_allocated(rounded);
        return DataPtr(p, &release);
      }
    }
    void* p = allocate_block(rounded);
    TS_CHECK(p != nullptr, "cpu: out of memory allocating ", nbytes, " bytes");
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[p] = rounded;
    count_allocated(rounded);
    return DataPtr(p, &release);
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return {static_cast<int64_t>(allocated_bytes_), static_cast<int64_t>(cached_bytes_),
            static_cast<int64_t>(peak_bytes_)};
  }
  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_bytes_ = allocated_bytes_;
  }

  static CachingHostAllocator& instance() {
    // Intentionally never destroyed: tensors in static objects may be freed after main.
    static CachingHostAllocator* a = new CachingHostAllocator();
    return *a;
  }

 private:
  static void release(void* p) { instance().give_back(p); }

  void count_allocated(size_t bytes) {  // (under mutex_)
    allocated_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, allocated_bytes_);
  }

  void give_back(void* p) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = sizes_.find(p);
    const size_t size = it->second;
    sizes_.erase(it);
    allocated_bytes_ -= size;
    if (cached_bytes_ + size > kMaxCachedBytes || HostCacheBypass::active()) {
      free_block(p, size);
      return;
    }
    free_.emplace(size, p);
    cached_bytes_ += size;
  }

  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> sizes_;
  size_t cached_bytes_ = 0, allocated_bytes_ = 0, peak_bytes_ = 0;
};

const bool registered = [] {
  register_allocator(DeviceType::CPU, &CachingHostAllocator::instance());
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
