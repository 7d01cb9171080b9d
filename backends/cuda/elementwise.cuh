// Elementwise launchers shared by the unary, binary and dropout kernels. Contiguous operands
// take a vectorised path (16-byte loads and stores when every pointer is aligned); strided
// (broadcast or transposed) operands take an indexed path over dims coalesced on the host.
#pragma once
#include <array>

#include "kernel_util.cuh"

namespace tessera::cuda {

template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// y[i] = f(i, a[i], b[i]) over contiguous arrays (b may be null for unary maps).
template <int N, class Out, class In, class F>
__global__ void map_contiguous(Out* y, const In* a, const In* b, int64_t n, F f) {
  const int64_t base = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) * N;
  if (base >= n) return;
  if (base + N <= n) {
    Pack<In, N> pa = *reinterpret_cast<const Pack<In, N>*>(a + base), pb{};
    if (b) pb = *reinterpret_cast<const Pack<In, N>*>(b + base);
    Pack<Out, N> py;
#pragma unroll
    for (int k = 0; k < N; ++k) py.v[k] = f(base + k, pa.v[k], pb.v[k]);
    *reinterpret_cast<Pack<Out, N>*>(y + base) = py;
  } else {
    for (int64_t i = base; i < n; ++i) y[i] = f(i, a[i], b ? b[i] : In{});
  }
}

inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <class Out, class In, class F>
void launch_contiguous(Out* y, const In* a, const In* b, int64_t n, F f, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int N = 16 / sizeof(In) > 0 ? 16 / sizeof(In) : 1;
  const bool vec = aligned16(a) && (!b || aligned16(b)) &&
                   reinterpret_cast<uintptr_t>(y) % (sizeof(Out) * N) == 0;
  if (vec)
    map_contiguous<N><<<grid_for(n, N), kThreads, 0, stream>>>(y, a, b, n, f);
  else
    map_contiguous<1><<<grid_for(n), kThreads, 0, stream>>>(y, a, b, n, f);
  TS_CUDA_LAUNCH_CHECK("elementwise");
}

// Merges adjacent dims that are laid out contiguously for every operand, so the indexed
// path does as few divisions as possible (a broadcast bias add becomes two dims).
template <size_t K>
void coalesce(Shape& shape, std::array<Shape, K>& strides) {
  Shape s2;
  std::array<Shape, K> st2;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !s2.empty();
    for (size_t k = 0; merge && k < K; ++k) merge = st2[k].back() == strides[k][d] * shape[d];
    if (merge) {
      s2.back() *= shape[d];
      for (size_t k = 0; k < K; ++k) st2[k].back() = strides[k][d];
    } else {
      s2.push_back(shape[d]);
      for (size_t k = 0; k < K; ++k) st2[k].push_back(strides[k][d]);
    }
  }
  shape = s2;
  strides = st2;
}

}  // namespace tessera::cuda
