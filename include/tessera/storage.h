// Reference-counted bytes on one device, shared by a tensor and all its views.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tessera/device.h"

namespace tessera {

using DataPtr = std::unique_ptr<void, void (*)(void*)>;

// Bytes an allocator has handed out and not had back (allocated), holds for reuse (cached),
// and the most it had handed out at once since the last reset (peak_allocated).
struct AllocatorStats {
  int64_t allocated = 0, cached = 0, peak_allocated = 0;
};

// Backends register one allocator per device type (core knows none of them).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual DataPtr allocate(size_t nbytes, Device device) = 0;
  virtual AllocatorStats stats() const { return {}; }
  virtual void reset_peak() {}
};
void register_allocator(DeviceType type, Allocator* allocator);
// While one lives on this thread, host blocks freed go back to the system instead of the
// host allocator's cache: memory given up on purpose (optimizer state swapped to disk) leaves
// the process rather than waiting for the next block of its size.
class HostCacheBypass {
 public:
  HostCacheBypass();
  ~HostCacheBypass();
  HostCacheBypass(const HostCacheBypass&) = delete;
  HostCacheBypass& operator=(const HostCacheBypass&) = delete;
  static bool active();

 private:
  bool was_ = false;
};
Allocator& allocator_for(DeviceType type);

// Page-locked ("pinned") host memory, which the GPU reads and writes directly, so host<->GPU
// copies run at full bus speed and a host->GPU copy returns before it is done. The CUDA
// backend provides it. Because such a copy may still be reading a block after the call
// returned, the dispatcher calls wait_for_copies before a CPU kernel writes pinned memory.
class PinnedAllocator : public Allocator {
 public:
  virtual void wait_for_copies(const void* base) = 0;
};
void register_pinned_allocator(PinnedAllocator* allocator);
PinnedAllocator& pinned_allocator();  // fails, saying why, where there is none

class Storage;

// ZeRO-3 keeps only a shard of each parameter on a rank: the parameter's storage is released
// between uses and re-gathered when an op needs it. The dispatcher calls fetch() before a
// kernel reads or writes a released storage (hit() when it is resident), and used() after the
// kernel ran.
class StorageFetcher {
 public:
  virtual ~StorageFetcher() = default;
  virtual void fetch(Storage& storage) = 0;  // must leave the storage resident
  virtual void hit(Storage&) {}              // a use of it while resident
  virtual void used(Storage& storage) = 0;   // may release it again
};

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  // Host bytes from the pinned allocator (device must be the CPU).
  static std::shared_ptr<Storage> pinned(size_t nbytes);
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }

  // Released storage keeps its size and identity (tensors and saved autograd values still
  // point at it) but holds no bytes until it is made resident again.
  bool resident() const { return data_ != nullptr || nbytes_ == 0; }
  void release() { data_.reset(); }
  void make_resident();  // allocates (uninitialised) bytes if released
  // Takes `other`'s bytes (same size and device), leaving it released: a ZeRO-3 parameter
  // gathered ahead of use into a separate buffer becomes resident without a copy.
  void adopt(Storage& other);
  StorageFetcher* fetcher() const { return fetcher_.get(); }
  void set_fetcher(std::shared_ptr<StorageFetcher> f) { fetcher_ = std::move(f); }
  Device device() const { return device_; }
  bool is_pinned() const { return pinned_; }
  // Blocks until no asynchronous copy still reads these (pinned) bytes; a no-op otherwise.
  void wait_for_copies() const;

  // Bumped by every in-place write; autograd compares it with the value seen when it
  // saved a tensor, so a tensor modified after being saved is an error at backward time.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  Storage(size_t nbytes, Device device, bool pinned);
  Allocator& allocator() const;

  size_t nbytes_;
  Device device_;
  bool pinned_ = false;
  DataPtr data_;
  std::shared_ptr<StorageFetcher> fetcher_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace tessera
