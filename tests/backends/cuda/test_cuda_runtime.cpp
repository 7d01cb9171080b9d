// CUDA runtime basics. Each test skips with the reason when no GPU is visible.
#include <doctest/doctest.h>

#include "skip.h"

#include "tessera/tessera.h"

using namespace tessera;

TEST_CASE("cuda: status is reported either way") {
  if (cuda_device_count() == 0)
    CHECK_FALSE(cuda_unavailable_reason().empty());
  else
    CHECK(cuda_unavailable_reason().empty());
}

TEST_CASE("cuda: host -> device -> host round trip is exact for every dtype" *
          test::gpu_required()) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64,
                   DType::Int32, DType::Bool}) {
    const Tensor host = (randn({17, 3}) * 3.0).to(dt);
    const Tensor back = host.to(Device::cuda(0)).to(Device::cpu());
    CHECK(back.to_vector() == host.to_vector());
  }
}

TEST_CASE("cuda: fill writes the value" * test::gpu_required()) {
  const Tensor t = full({1000}, 2.5, DType::Float32, Device::cuda(0));
  for (double v : t.to_vector()) CHECK(v == 2.5);
}

TEST_CASE("cuda: the caching allocator reuses blocks, so a repeated step makes no cudaMalloc" *
          test::gpu_required()) {
  const Device d = Device::cuda(0);
  auto step = [&] {
    const Tensor a = randn({512, 256}).to(d), b = randn({256, 128}).to(d);
    return sum(relu(matmul(a, b))).item();
  };
  step();  // warm-up: the sizes this step needs are now cached
  const CudaMemoryStats before = cuda_memory_stats(0);
  for (int i = 0; i < 5; ++i) step();
  const CudaMemoryStats after = cuda_memory_stats(0);
  CHECK(after.device_allocations == before.device_allocations);
  CHECK(after.cache_hits > before.cache_hits);
  CHECK(after.allocated == before.allocated);  // nothing leaked
  CHECK(after.reserved >= after.allocated);
  CHECK(after.peak_allocated >= 512 * 256 * 4);
}

TEST_CASE("cuda: out of memory names the request and what is free" * test::gpu_required()) {
  CHECK_THROWS_WITH(Tensor::empty({int64_t{1} << 45}, DType::Float32, Device::cuda(0)),
                    doctest::Contains("out of memory on cuda:0: tried to allocate"));
  // Still usable afterwards.
  CHECK(full({4}, 1.5, DType::Float32, Device::cuda(0)).to_vector()[3] == 1.5);
}

TEST_CASE("cuda: strided and casting copies in every direction" * test::gpu_required()) {
  const Device d = Device::cuda(0);
  const Tensor x = randn({6, 7});
  // host transposed view -> device, device transposed view -> host, device cast
  CHECK(x.t().to(d).to(Device::cpu()).to_vector() == x.t().contiguous().to_vector());
  CHECK(x.to(d).t().to(Device::cpu()).to_vector() == x.t().contiguous().to_vector());
  CHECK(x.to(d).to(DType::BFloat16).to(Device::cpu()).to_vector() ==
        x.to(DType::BFloat16).to_vector());
  Tensor dst = zeros({7, 6}, DType::Float64, d);
  dst.copy_(x.t());  // host float32 strided -> device float64
  CHECK(dst.to(Device::cpu()).to_vector() == x.t().to(DType::Float64).contiguous().to_vector());
}

TEST_CASE("cuda: random draws equal the CPU's for the same seed" * test::gpu_required()) {
  Generator g1(123), g2(123);
  const auto cpu = randn({1000}, DType::Float32, Device::cpu(), &g1).to_vector();
  const auto gpu = randn({1000}, DType::Float32, Device::cuda(0), &g2).to_vector();
  int64_t equal = 0;
  for (size_t i = 0; i < cpu.size(); ++i) equal += cpu[i] == gpu[i];
  CHECK(equal >= 998);  // the device's log/cos may differ from glibc's by one ulp, rarely
  Generator g3(5), g4(5);
  CHECK(rand({777}, DType::Float32, Device::cpu(), &g3).to_vector() ==
        rand({777}, DType::Float32, Device::cuda(0), &g4).to_vector());
}

TEST_CASE("cuda: dropout masks equal the CPU's, for any offset, size and dtype" *
          test::gpu_required()) {
  for (DType dt : {DType::Float32, DType::BFloat16, DType::Float16, DType::Float64}) {
    for (uint64_t skip : {0, 1, 2, 3}) {  // aligned and unaligned stream offsets
      for (int64_t n : {1, 5, 4096, 100003}) {
        INFO(dtype_name(dt), " offset ", skip, " n ", n);
        const Tensor x = (randn({n}) + 3.0).to(dt);  // never 0, so 0 means dropped
        Generator g1(77), g2(77);
        g1.reserve(skip), g2.reserve(skip);
        const Tensor cpu = dropout(x, 0.4, true, &g1);
        const Tensor gpu = dropout(x.to(Device::cuda(0)), 0.4, true, &g2);
        CHECK(gpu.to(Device::cpu()).to_vector() == cpu.to_vector());
        CHECK(g1.state().offset == g2.state().offset);
      }
    }
  }
}
