// embedding: inputs weight [V, D] (contiguous), indices [n] int64; output [n, D].
// embedding_backward: inputs grad [n, D], indices [n]; output dweight [V, D].
// Backward is deterministic without float atomics: positions are sorted by index with CUB's
// stable radix sort, then one block per distinct index sums its rows in position order (the
// same order, and so the same bits in float32, as the CPU kernel).
#include <cub/device/device_radix_sort.cuh>

#include "kernel_util.cuh"

namespace tessera::cuda {
namespace {

__global__ void check_indices_kernel(const int64_t* idx, int64_t n, int64_t V,
                                     unsigned long long* bad) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n && (idx[i] < 0 || idx[i] >= V)) atomicMin(bad, static_cast<unsigned long long>(i));
}

void check_indices(const TensorBase& indices, int64_t V) {
  const int64_t n = indices.numel();
  if (n == 0) return;
  IndexCheck check(indices.device());
  check_indices_kernel<<<grid_for(n), kThreads, 0, stream_of(indices)>>>(
      static_cast<const int64_t*>(indices.data_ptr()), n, V, check.flag());
  TS_CUDA_LAUNCH_CHECK("embedding");
  const int64_t bad = check.first_bad();
  if (bad >= 0) {
    const int64_t v = indices.reshape({-1}).narrow(0, bad, 1).to_int_vector()[0];
    fail("embedding: index ", v, " at position ", bad, " is out of range for a table of ", V,
         " rows");
  }
}

template <class T>
__global__ void gather_kernel(const T* w, const int64_t* idx, T* y, int64_t n, int64_t D) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n * D) return;
  const int64_t row = i / D, col = i % D;
  y[i] = w[idx[row] * D + col];
}

template <class T>
struct Embedding {
  static void run(const KernelCall& c) {
    const int64_t V = c.inputs[0].shape()[0], D = c.inputs[0].shape()[1];
    const int64_t n = c.inputs[1].numel();
    check_indices(c.inputs[1], V);
    if (n * D == 0) return;
    const void* w = c.inputs[0].data_ptr();
    void* y = c.outputs[0].data_ptr();
    if ((D * sizeof(T)) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
        reinterpret_cast<uintptr_t>(y) % 16 == 0) {
      // Rows as 16-byte words.
      const int64_t words = D * static_cast<int64_t>(sizeof(T)) / 16;
      gather_kernel<uint4><<<grid_for(n * words), kThreads, 0, stream_of(c.outputs[0])>>>(
          static_cast<const uint4*>(w), static_cast<const int64_t*>(c.inputs[1].data_ptr()),
          static_cast<uint4*>(y), n, words);
      TS_CUDA_LAUNCH_CHECK("embedding");
      return;
    }
    gather_kernel<T><<<grid_for(n * D), kThreads, 0, stream_of(c.outputs[0])>>>(
        static_cast<const T*>(c.inputs[0].data_ptr()),
        static_cast<const int64_t*>(c.inputs[1].data_ptr()),
        static_cast<T*>(c.outputs[0].data_ptr()), n, D);
    TS_CUDA_LAUNCH_CHECK("embedding");
  }
};

__global__ void iota_kernel(int64_t* p, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) p[i] = i;
}

// Block b starts work only if sorted position b begins a run of equal indices.
template <class T>
__global__ void segment_sum_kernel(const T* g, const int64_t* keys, const int64_t* pos, T* dw,
                                   int64_t n, int64_t D) {
  const int64_t b = blockIdx.x;
  const int64_t key = keys[b];
  if (b > 0 && keys[b - 1] == key) return;
  int64_t end = b + 1;
  while (end < n && keys[end] == key) ++end;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    compute_t<T> s = 0;
    for (int64_t k = b; k < end; ++k) s += load(g[pos[k] * D + j]);
    dw[key * D + j] = convert<T>(s);
  }
}

template <class T>
struct EmbeddingBackward {
  static void run(const KernelCall& c) {
    const int64_t n = c.inputs[1].numel(), D = c.inputs[0].shape()[1];
    TensorBase& dw = c.outputs[0];
    const int64_t V = dw.shape()[0];
    const Device dev = dw.device();
    cudaStream_t stream = stream_of(dw);
    check_indices(c.inputs[1], V);
    TS_CUDA_CHECK(cudaMemsetAsync(dw.data_ptr(), 0, dw.nbytes(), stream));
    if (n == 0 || D == 0) return;
    TensorBase keys_out = TensorBase::empty({n}, DType::Int64, dev);
    TensorBase pos_in = TensorBase::empty({n}, DType::Int64, dev),
               pos_out = TensorBase::empty({n}, DType::Int64, dev);
    iota_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<int64_t*>(pos_in.data_ptr()), n);
    TS_CUDA_LAUNCH_CHECK("embedding_backward");
    int end_bit = 1;
    while (end_bit < 63 && (int64_t{1} << end_bit) < V) ++end_bit;
    const auto* keys_in = static_cast<const int64_t*>(c.inputs[1].data_ptr());
    size_t temp_bytes = 0;
    TS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, temp_bytes, keys_in, static_cast<int64_t*>(keys_out.data_ptr()),
        static_cast<const int64_t*>(pos_in.data_ptr()), static_cast<int64_t*>(pos_out.data_ptr()),
        n, 0, end_bit, stream));
    TensorBase temp = scratch(static_cast<int64_t>(temp_bytes), dev);
    TS_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        temp.data_ptr(), temp_bytes, keys_in, static_cast<int64_t*>(keys_out.data_ptr()),
        static_cast<const int64_t*>(pos_in.data_ptr()), static_cast<int64_t*>(pos_out.data_ptr()),
        n, 0, end_bit, stream));
    segment_sum_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        static_cast<const T*>(c.inputs[0].data_ptr()),
        static_cast<const int64_t*>(keys_out.data_ptr()),
        static_cast<const int64_t*>(pos_out.data_ptr()), static_cast<T*>(dw.data_ptr()), n, D);
    TS_CUDA_LAUNCH_CHECK("embedding_backward");
  }
};

const bool registered = [] {
  register_floating<Embedding>(Kernel::embedding);
  register_floating<EmbeddingBackward>(Kernel::embedding_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
