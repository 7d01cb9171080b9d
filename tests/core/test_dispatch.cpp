// The dispatcher reaches a device's runtime only through the hooks a backend registers.
#include <doctest/doctest.h>

#include <vector>

#include "tessera/cuda.h"
#include "tessera/dispatch.h"

using namespace tessera;

namespace {
std::vector<int> events;  // device index made current (>= 0), or -1 for the kernel itself
void fake_set_current(int index) {
  events.push_back(index);
}
void fake_kernel(const KernelCall&) {
  events.push_back(-1);
}
}  // namespace

TEST_CASE("run_kernel makes the kernel's device current through the registered runtime hook") {
  // A kernel with no bool entry on either device, so no real kernel is displaced (a build
  // without CUDA has no CUDA entries at all).
  Kernel free_slot = Kernel{};
  bool found = false;
  for (int k = 0; k < kNumKernels && !found; ++k)
    if (!has_kernel(static_cast<Kernel>(k), DeviceType::CUDA, DType::Bool) &&
        !has_kernel(static_cast<Kernel>(k), DeviceType::CPU, DType::Bool)) {
      free_slot = static_cast<Kernel>(k);
      found = true;
    }
  REQUIRE(found);
  register_kernel(free_slot, DeviceType::CUDA, DType::Bool, fake_kernel);
  register_device_runtime(DeviceType::CUDA, {.set_current_device = fake_set_current});
  events.clear();
  run_kernel(free_slot, Device::cuda(3), DType::Bool, {}, {});
  CHECK(events == std::vector<int>{3, -1});
  // CPU has no runtime hook: only the kernel runs.
  register_kernel(free_slot, DeviceType::CPU, DType::Bool, fake_kernel);
  events.clear();
  run_kernel(free_slot, Device::cpu(), DType::Bool, {}, {});
  CHECK(events == std::vector<int>{-1});
  // Put back what the CUDA backend registers, and free the slots.
  register_device_runtime(DeviceType::CUDA, {.set_current_device = cuda_set_current_device,
                                             .synchronize = cuda_synchronize});
  register_kernel(free_slot, DeviceType::CUDA, DType::Bool, nullptr);
  register_kernel(free_slot, DeviceType::CPU, DType::Bool, nullptr);
}

TEST_CASE("a kernel registered against another kernel list is refused, and the error says why") {
  // What a stale object (compiled before dispatch.h's list changed) passes: another
  // fingerprint. Its kernel must not land in the table under a shifted number.
  Kernel free_slot = Kernel{};
  bool found = false;
  for (int k = 0; k < kNumKernels && !found; ++k)
    if (!has_kernel(static_cast<Kernel>(k), DeviceType::CUDA, DType::Bool)) {
      free_slot = static_cast<Kernel>(k);
      found = true;
    }
  REQUIRE(found);
  CHECK(kKernelListFingerprint != kernel_list_fingerprint("copy fill "));
  register_kernel(free_slot, DeviceType::CUDA, DType::Bool, fake_kernel,
                  kernel_list_fingerprint("copy fill "));
  CHECK_FALSE(has_kernel(free_slot, DeviceType::CUDA, DType::Bool));
  register_device_runtime(DeviceType::CUDA, {});
  events.clear();
  try {
    run_kernel(free_slot, Device::cuda(0), DType::Bool, {}, {});
    FAIL("expected an error");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("no kernel for dtype bool on cuda:0") != std::string::npos);
    CHECK(what.find("compiled against another kernel list") != std::string::npos);
  }
  CHECK(events.empty());
  register_device_runtime(DeviceType::CUDA, {.set_current_device = cuda_set_current_device,
                                             .synchronize = cuda_synchronize});
}
