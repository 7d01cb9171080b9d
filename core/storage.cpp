#include "tessera/storage.h"

#include <array>

#include "tessera/error.h"

namespace tessera {

namespace {
std::array<Allocator*, kNumDeviceTypes>& allocators() {
  static std::array<Allocator*, kNumDeviceTypes> table{};
  return table;
}
PinnedAllocator*& pinned_slot() {
  static PinnedAllocator* slot = nullptr;
  return slot;
}
}  // namespace

void register_allocator(DeviceType type, Allocator* allocator) {
  allocators()[static_cast<int>(type)] = allocator;
}

Allocator& allocator_for(DeviceType type) {
  Allocator* a = allocators()[static_cast<int>(type)];
  TS_CHECK(a != nullptr, "no allocator for device type ", type == DeviceType::CPU ? "cpu" : "cuda",
           type == DeviceType::CUDA ? " (this build has no CUDA backend)" : "");
  return *a;
}

void register_pinned_allocator(PinnedAllocator* allocator) {
  pinned_slot() = allocator;
}

PinnedAllocator& pinned_allocator() {
  TS_CHECK(pinned_slot() != nullptr,
           "pinned host memory needs the CUDA backend, and this build has none");
  return *pinned_slot();
}

Storage::Storage(size_t nbytes, Device device) : Storage(nbytes, device, false) {}

// allocator() reads device_ and pinned_, which are initialised before data_.
Storage::Storage(size_t nbytes, Device device, bool pinned)
    : nbytes_(nbytes),
      device_(device),
      pinned_(pinned),
      data_(allocator().allocate(nbytes, device)) {}

std::shared_ptr<Storage> Storage::pinned(size_t nbytes) {
  return std::shared_ptr<Storage>(new Storage(nbytes, Device::cpu(), true));
}

Allocator& Storage::allocator() const {
  return pinned_ ? pinned_allocator() : allocator_for(device_.type);
}

namespace {
thread_local bool host_cache_bypassed = false;
}

HostCacheBypass::HostCacheBypass() : was_(host_cache_bypassed) {
  host_cache_bypassed = true;
}
HostCacheBypass::~HostCacheBypass() {
  host_cache_bypassed = was_;
}
bool HostCacheBypass::active() {
  return host_cache_bypassed;
}

void Storage::make_resident() {
  if (!resident()) data_ = allocator().allocate(nbytes_, device_);
}

void Storage::wait_for_copies() const {
  if (pinned_ && data_) pinned_allocator().wait_for_copies(data_.get());
}

void Storage::adopt(Storage& other) {
  TS_CHECK(other.nbytes_ == nbytes_ && other.device_ == device_ && other.data_,
           "Storage::adopt: expected resident storage of ", nbytes_, " bytes on ", device_.str(),
           ", got ", other.nbytes_, " bytes on ", other.device_.str());
  data_ = std::move(other.data_);
}

}  // namespace tessera
