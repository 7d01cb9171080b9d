// Reference-counted bytes on one device, shared by a tensor and all its views.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tessera/device.h"

namespace tessera {

using DataPtr = std::unique_ptr<void, void (*)(void*)>;

// Backends register one allocator per device type (core knows none of them).
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual DataPtr allocate(size_t nbytes, Device device) = 0;
};
void register_allocator(DeviceType type, Allocator* allocator);
Allocator& allocator_for(DeviceType type);

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Bumped by every in-place write; autograd compares it with the value seen when it
  // saved a tensor, so a tensor modified after being saved is an error at backward time.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  size_t nbytes_;
  Device device_;
  DataPtr data_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace tessera
