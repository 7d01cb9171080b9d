// Host memory: 64-byte aligned so Eigen and BLAS get aligned rows.
#include <cstdlib>
#include <new>

#include "tessera/error.h"
#include "tessera/storage.h"

namespace tessera::cpu {
namespace {

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, Device) override {
    const size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    TS_CHECK(p != nullptr, "cpu: out of memory allocating ", nbytes, " bytes");
    return DataPtr(p, &std::free);
  }
};

const bool registered = [] {
  static CpuAllocator allocator;
  register_allocator(DeviceType::CPU, &allocator);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
