// The parameterised op test: every op in the catalog, every floating dtype, forward and
// gradient against float64, plus float64 gradients against finite differences.
#include <doctest/doctest.h>

#include "tessera/cuda.h"
#include "tessera/dispatch.h"
#include "tessera/op_catalog.h"

using namespace tessera;

namespace {
void check_all(Device device) {
  const DType dtypes[] = {DType::Float64, DType::Float32, DType::BFloat16, DType::Float16};
  for (const auto& spec : testing::op_catalog()) {
    for (DType dt : dtypes) {
      for (const auto& r : testing::check_op(spec, device, dt, dt == DType::Float64)) {
        INFO(r.op, " [", r.label, "] ", dtype_name(dt), " on ", device.str(), " ", r.what);
        CHECK_MESSAGE(r.ok, r.message);
      }
    }
  }
}
}  // namespace

TEST_CASE("every catalog op passes on cpu at every floating dtype") {
  check_all(Device::cpu());
}

TEST_CASE("every catalog op passes on cuda") {
  if (cuda_device_count() == 0) {
    MESSAGE("SKIPPED: CUDA op checks need a GPU: " << cuda_unavailable_reason());
    return;
  }
  check_all(Device::cuda(0));
}

TEST_CASE("the catalog covers every backend kernel") {
  for (int k = 0; k < kNumKernels; ++k) {
    const std::string name = kernel_name(static_cast<Kernel>(k));
    bool covered = false;
    for (const auto& spec : testing::op_catalog())
      covered = covered || spec.kernels.find(name) != std::string::npos;
    CHECK_MESSAGE(covered, "kernel " << name << " is exercised by no catalog op");
  }
}
