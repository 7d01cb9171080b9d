// Pinned (page-locked) host memory: Tensor::pin_memory, copies through it, the guard that
// keeps host writes from racing an asynchronous host->GPU copy, and the allocator's cache.
// GPU cases skip with the reason when no GPU is visible.
#include <doctest/doctest.h>

#include "skip.h"

#include "tessera/tessera.h"

using namespace tessera;

TEST_CASE("pinned: without a GPU, pin_memory fails and says why") {
  if (cuda_device_count() > 0) {
    CHECK(randn({3}).pin_memory().is_pinned());
    return;
  }
  // No CUDA backend: "needs the CUDA backend"; a backend but no device: cudaHostAlloc's error.
  CHECK_THROWS_WITH(randn({3}).pin_memory(), doctest::Contains("pinned host memory"));
  CHECK_FALSE(randn({3}).is_pinned());
}

TEST_CASE("pinned: pin_memory copies exactly, once, and only host tensors" * test::gpu_required()) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64,
                   DType::Bool}) {
    const Tensor host = (randn({33, 5}) * 4.0).to(dt);
    const Tensor pinned = host.transpose(0, 1).pin_memory();  // strided source
    CHECK(pinned.is_pinned());
    CHECK(pinned.is_contiguous());
    CHECK(pinned.to_vector() == host.transpose(0, 1).to_vector());
    CHECK(pinned.pin_memory().same(pinned));  // already pinned: the same tensor
  }
  const Tensor on_gpu = randn({4}).to(Device::cuda(0));
  CHECK_THROWS_WITH(on_gpu.pin_memory(), doctest::Contains("is not in host memory"));
}

TEST_CASE("pinned: copies to and from the GPU in every dtype, casting and strided" *
          test::gpu_required()) {
  const Device d = Device::cuda(0);
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32}) {
    const Tensor host = (randn({64, 48}) * 8.0).to(dt);
    const Tensor src = host.pin_memory();
    const Tensor dev = src.to(d);  // the asynchronous path
    Tensor back = Tensor::empty_pinned({64, 48}, dt);
    back.copy_(dev);  // device -> pinned
    CHECK(back.to_vector() == host.to_vector());
    // Casting and strided copies into and out of pinned memory take the staged paths.
    Tensor wide = Tensor::empty({48, 64}, DType::Float64, d);
    wide.copy_(src.transpose(0, 1));
    CHECK(wide.to(Device::cpu()).to_vector() ==
          host.to(DType::Float64).t().contiguous().to_vector());
    Tensor narrow_back = Tensor::empty_pinned({48, 64}, DType::Float64);
    narrow_back.copy_(dev.transpose(0, 1));
    CHECK(narrow_back.to_vector() == host.to(DType::Float64).t().contiguous().to_vector());
  }
}

TEST_CASE("pinned: a host write waits for the asynchronous copy still reading the bytes" *
          test::gpu_required()) {
  const int64_t n = int64_t{1} << 24;  // 128 MB of float64: the copy takes milliseconds
  Tensor host = arange(0, static_cast<double>(n), 1.0, DType::Float64).pin_memory();
  for (int round = 0; round < 3; ++round) {
    const Tensor dev = host.to(Device::cuda(0));  // returns before the DMA is done
    host.fill_(-1.0);                             // must not change what the GPU reads
    // the sum of 0..n-1 is exact in float64 (every partial sum < 2^53)
    CHECK(sum(dev).item() == static_cast<double>(n) * static_cast<double>(n - 1) / 2.0);
    host.copy_(arange(0, static_cast<double>(n), 1.0, DType::Float64));
  }
}

TEST_CASE("pinned: the allocator caches blocks and gives them back" * test::gpu_required()) {
  auto transfer = [] {
    const Tensor p = randn({256, 1024}).pin_memory();
    return sum(p.to(Device::cuda(0))).item();
  };
  transfer();  // warm-up: this size is now cached
  const CudaPinnedMemoryStats before = cuda_pinned_memory_stats();
  for (int i = 0; i < 5; ++i) transfer();
  const CudaPinnedMemoryStats after = cuda_pinned_memory_stats();
  CHECK(after.host_allocations == before.host_allocations);
  CHECK(after.cache_hits > before.cache_hits);
  CHECK(after.allocated == before.allocated);  // nothing leaked
  CHECK(after.peak_allocated >= 256 * 1024 * 4);
  cuda_empty_cache();
  CHECK(cuda_pinned_memory_stats().reserved == cuda_pinned_memory_stats().allocated);
}

TEST_CASE("pinned: pin_memory passes gradients through unchanged" * test::gpu_required()) {
  Tensor x = randn({5, 3});
  x.requires_grad_(true);
  const Tensor y = x.pin_memory();
  CHECK(y.is_pinned());
  sum(y * 3.0).backward();
  for (double g : x.grad().to_vector()) CHECK(g == 3.0);
}
