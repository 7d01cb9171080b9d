#include "tessera/storage.h"

#include <array>

#include "tessera/error.h"

namespace tessera {

namespace {
std::array<Allocator*, kNumDeviceTypes>& allocators() {
  static std::array<Allocator*, kNumDeviceTypes> table{};
  return table;
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

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes),
      device_(device),
      data_(allocator_for(device.type).allocate(nbytes, device)) {}

void Storage::make_resident() {
  if (!resident()) data_ = allocator_for(device_.type).allocate(nbytes_, device_);
}

void Storage::adopt(Storage& other) {
  TS_CHECK(other.nbytes_ == nbytes_ && other.device_ == device_ && other.data_,
           "Storage::adopt: expected resident storage of ", nbytes_, " bytes on ", device_.str(),
           ", got ", other.nbytes_, " bytes on ", other.device_.str());
  data_ = std::move(other.data_);
}

}  // namespace tessera
