// Page-locked host memory (cudaHostAlloc), cached by rounded size like the device allocator,
// since pinning and unpinning pages costs milliseconds. A host->GPU copy from pinned memory
// returns before the GPU has read the bytes, so each such copy leaves an event on its block:
// the block is not handed out again, and a CPU kernel does not overwrite it, until the
// events have completed.
// Written here rather than taken from a library: the CUDA runtime has no host-memory pool.
#include "pinned_allocator.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda_check.h"
#include "tessera/cuda.h"

namespace tessera::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Powers of two up to 1 MiB, then whole MiB: few distinct sizes, at most 2x waste.
size_t rounded(size_t n) {
  if (n >= kMiB) return (n + kMiB - 1) / kMiB * kMiB;
  size_t size = 4096;
  while (size < n) size *= 2;
  return size;
}

class PinnedHostAllocator final : public PinnedAllocator {
 public:
  DataPtr allocate(size_t nbytes, Device) override {
    if (nbytes == 0) return DataPtr(nullptr, [](void*) {});
    const size_t size = rounded(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* p = take_cached(size);
    if (p) {
      ++stats_.cache_hits;
    } else {
      p = host_alloc(size, nbytes);
      blocks_[p].size = size;
      stats_.reserved += static_cast<int64_t>(size);
      ++stats_.host_allocations;
    }
    stats_.allocated += static_cast<int64_t>(size);
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    return DataPtr(p, &PinnedHostAllocator::release);
  }

  void record_copy(const void* base, cudaStream_t stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(const_cast<void*>(base));
    if (it == blocks_.end()) return;
    cudaEvent_t e = take_event();
    TS_CUDA_CHECK(cudaEventRecord(e, stream));
    it->second.pending.push_back(e);
  }

  void wait_for_copies(const void* base) override {
    std::vector<cudaEvent_t> pending;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = blocks_.find(const_cast<void*>(base));
      if (it == blocks_.end()) return;
      pending.swap(it->second.pending);
    }
    if (pending.empty()) return;
    for (cudaEvent_t e : pending) TS_CUDA_CHECK(cudaEventSynchronize(e));
    std::lock_guard<std::mutex> lock(mutex_);
    for (cudaEvent_t e : pending) events_.push_back(e);
  }

  CudaPinnedMemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mutex_);
    free_cached();
  }

  static PinnedHostAllocator& instance() {
    static PinnedHostAllocator* a = new PinnedHostAllocator();  // outlives static tensors
    return *a;
  }

 private:
  struct Block {
    size_t size = 0;
    std::vector<cudaEvent_t> pending;  // copies that may still read the block
  };

  // A cached block of `size` whose copies have all finished, or nullptr.
  void* take_cached(size_t size) {
    auto [first, last] = free_.equal_range(size);
    for (auto it = first; it != last; ++it) {
      void* p = it->second;
      if (!copies_done(blocks_[p])) continue;
      free_.erase(it);
      return p;
    }
    return nullptr;
  }

  bool copies_done(Block& b) {
    for (cudaEvent_t e : b.pending) {
      const cudaError_t s = cudaEventQuery(e);
      if (s == cudaErrorNotReady) return false;
      TS_CUDA_CHECK(s);
    }
    for (cudaEvent_t e : b.pending) events_.push_back(e);
    b.pending.clear();
    return true;
  }

  cudaEvent_t take_event() {
    if (!events_.empty()) {
      cudaEvent_t e = events_.back();
      events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    TS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  void* host_alloc(size_t size, size_t asked) {
    TS_CHECK(cuda_device_count() > 0, "cuda: pinned host memory needs a CUDA device (",
             cuda_unavailable_reason(), ")");
    void* p = nullptr;
    // Portable: pinned for every GPU of the process, not only the current one.
    cudaError_t s = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (s != cudaSuccess) {
      cudaGetLastError();
      free_cached();  // give unused pinned pages back and try once more
      s = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    }
    if (s != cudaSuccess) {
      cudaGetLastError();
      fail("cuda: could not allocate ", asked, " bytes (", asked / kMiB,
           " MiB) of pinned host memory: cudaHostAlloc: ", cudaGetErrorName(s), " (",
           cudaGetErrorString(s), "); Tessera holds ", stats_.allocated / kMiB,
           " MiB pinned in tensors. Pinned pages cannot be swapped: use "
           "less (e.g. \"pin_memory\": false) or raise the locked-memory limit (ulimit -l)");
    }
    return p;
  }

  // Frees cached blocks no copy still reads (mutex held).
  void free_cached() {
    for (auto it = free_.begin(); it != free_.end();) {
      Block& b = blocks_[it->second];
      if (!copies_done(b)) {
        ++it;
        continue;
      }
      cudaFreeHost(it->second);
      stats_.reserved -= static_cast<int64_t>(b.size);
      blocks_.erase(it->second);
      it = free_.erase(it);
    }
  }

  static void release(void* p) {
    if (!p) return;
    PinnedHostAllocator& a = instance();
    std::lock_guard<std::mutex> lock(a.mutex_);
    auto it = a.blocks_.find(p);
    if (it == a.blocks_.end()) return;
    a.stats_.allocated -= static_cast<int64_t>(it->second.size);
    a.free_.emplace(it->second.size, p);
  }

  std::mutex mutex_;
  std::unordered_map<void*, Block> blocks_;  // every block, live or cached
  std::multimap<size_t, void*> free_;        // cached blocks by size
  std::vector<cudaEvent_t> events_;          // completed events for reuse
  CudaPinnedMemoryStats stats_;
};

const bool registered = [] {
  register_pinned_allocator(&PinnedHostAllocator::instance());
  return true;
}();

}  // namespace

void record_pinned_copy(const TensorBase& host, cudaStream_t stream) {
  if (host.defined() && host.is_pinned())
    PinnedHostAllocator::instance().record_copy(host.storage()->data(), stream);
}

void empty_pinned_cache() {
  PinnedHostAllocator::instance().empty_cache();
}

}  // namespace tessera::cuda

namespace tessera {

CudaPinnedMemoryStats cuda_pinned_memory_stats() {
  return cuda::PinnedHostAllocator::instance().stats();
}

}  // namespace tessera
