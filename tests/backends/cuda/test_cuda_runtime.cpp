// CUDA runtime basics. Each test skips with the reason when no GPU is visible.
#include <doctest/doctest.h>

#include "tessera/tessera.h"

using namespace tessera;

#define REQUIRE_GPU_OR_SKIP()                                               \
  if (cuda_device_count() == 0) {                                           \
    MESSAGE("SKIPPED: needs a CUDA device: " << cuda_unavailable_reason()); \
    return;                                                                 \
  }

TEST_CASE("cuda: status is reported either way") {
  if (cuda_device_count() == 0)
    CHECK_FALSE(cuda_unavailable_reason().empty());
  else
    CHECK(cuda_unavailable_reason().empty());
}

TEST_CASE("cuda: host -> device -> host round trip is exact for every dtype") {
  REQUIRE_GPU_OR_SKIP();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64,
                   DType::Int32, DType::Bool}) {
    const Tensor host = (randn({17, 3}) * 3.0).to(dt);
    const Tensor back = host.to(Device::cuda(0)).to(Device::cpu());
    CHECK(back.to_vector() == host.to_vector());
  }
}

TEST_CASE("cuda: fill writes the value") {
  REQUIRE_GPU_OR_SKIP();
  const Tensor t = full({1000}, 2.5, DType::Float32, Device::cuda(0));
  for (double v : t.to_vector()) CHECK(v == 2.5);
}
