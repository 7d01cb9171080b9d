// Shared pieces of the CUDA kernels: element types per DType, the accumulation type, value
// conversion, strided indexing, launch sizes, fixed-order block reductions and per-dtype
// registration. Reductions combine in a fixed tree order, so results are bit-identical run
// to run (no float atomics anywhere in the backend).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "../element_types.h"
#include "cuda_check.h"
#include "tessera/cuda_stream.h"

namespace tessera::cuda {

using Half = __half;
using BFloat16 = __nv_bfloat16;

template <class T>
inline constexpr bool is_16bit_float_v = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Compute type of elementwise math: float for 16-bit floats, else the type itself.
template <class T>
using compute_t = std::conditional_t<is_16bit_float_v<T>, float, T>;

template <class D, class S>
__host__ __device__ inline D convert(const S& s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (is_16bit_float_v<S>) {
    float f;
    if constexpr (std::is_same_v<S, Half>)
      f = __half2float(s);
    else
      f = __bfloat162float(s);
    return convert<D>(f);
  } else if constexpr (std::is_same_v<D, Half>) {
    return __float2half_rn(static_cast<float>(s));
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    return __float2bfloat16_rn(static_cast<float>(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else {
    return static_cast<D>(s);
  }
}
template <class T>
__device__ inline compute_t<T> load(const T& v) {
  return convert<compute_t<T>>(v);
}

// Up to kMaxDims dims; offsets of element `linear` (row-major over shape) for N operands.
// I = int32_t when every index and offset fits, which makes the divisions much cheaper.
constexpr int kMaxDims = 8;
template <int N, class I = int64_t>
struct StridedIndexer {
  int dims = 0;
  I shape[kMaxDims];
  I strides[N][kMaxDims];
  __device__ void offsets(I linear, I (&off)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = dims - 1; d >= 0; --d) {
      const I i = linear % shape[d];
      linear /= shape[d];
#pragma unroll
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
  }
};
// Builds an indexer over `shape` for tensors given with their strides (same rank).
template <int N, class I = int64_t>
StridedIndexer<N, I> make_indexer(const Shape& shape, const std::array<const Shape*, N>& strides) {
  StridedIndexer<N, I> ix{};
  TS_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "cuda: tensors of more than ", kMaxDims,
           " dims are not supported (got ", shape.size(), ")");
  ix.dims = static_cast<int>(shape.size());
  for (int d = 0; d < ix.dims; ++d) {
    ix.shape[d] = static_cast<I>(shape[d]);
    for (int k = 0; k < N; ++k) ix.strides[k][d] = static_cast<I>((*strides[k])[d]);
  }
  return ix;
}
// True when every element index and offset of these operands fits in int32.
template <size_t N>
bool fits_int32(const Shape& shape, const std::array<const Shape*, N>& strides) {
  int64_t numel = 1;
  for (int64_t s : shape) numel *= s;
  if (numel >= (int64_t{1} << 31)) return false;
  for (const Shape* st : strides) {
    int64_t far = 0;
    for (size_t d = 0; d < shape.size(); ++d) far += (shape[d] - 1) * std::abs((*st)[d]);
    if (far >= (int64_t{1} << 31)) return false;
  }
  return true;
}

constexpr int kThreads = 256;
inline unsigned grid_for(int64_t n, int per_thread = 1) {
  const int64_t per_block = int64_t{kThreads} * per_thread;
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 0x7fffffff ? 0x7fffffff : blocks));
}

inline cudaStream_t stream_of(const TensorBase& t) {
  return compute_stream(t.device().index);
}

// Fixed-order sum over a block of kBlock threads; every thread gets the result.
template <int kBlock, class A, class Op>
__device__ A block_reduce(A v, Op op) {
  __shared__ A shared[kBlock];
  shared[threadIdx.x] = v;
  __syncthreads();
#pragma unroll
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  const A r = shared[0];
  __syncthreads();
  return r;
}
// Warp-level reduction: an xor butterfly, whose result is taken from lane 0 (lanes may
// associate differently, so only one lane's value is used).
template <class A, class Op>
__device__ A warp_reduce(A v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return __shfl_sync(0xffffffffu, v, 0);
}
// Block reduction for arithmetic types through warp shuffles (two barriers instead of eight).
template <int kBlock, class A, class Op>
__device__ A block_reduce_fast(A v, Op op) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "block must be whole warps");
  __shared__ A partial[kBlock / 32];
  v = warp_reduce(v, op);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    A r = partial[0];
    for (int i = 1; i < kBlock / 32; ++i) r = op(r, partial[i]);
    partial[0] = r;
  }
  __syncthreads();
  const A r = partial[0];
  __syncthreads();
  return r;
}

struct SumOp {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a + b;
  }
};
struct MaxOp {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a > b ? a : b;
  }
};

// Dtype visiting and registration (shared with the CUDA backend: backends/element_types.h).
using Types = backend::ElementTypes<DeviceType::CUDA, Half, BFloat16>;
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  return Types::visit(dtype, std::forward<F>(f));
}
template <template <class> class Fn>
void register_floating(Kernel k) {
  Types::register_floating<Fn>(k);
}
template <template <class> class Fn>
void register_numeric(Kernel k) {
  Types::register_numeric<Fn>(k);
}
template <template <class> class Fn>
void register_all(Kernel k) {
  Types::register_all<Fn>(k);
}

// A device scratch buffer from the caching allocator (freed stream-ordered like a tensor).
TensorBase scratch(int64_t nbytes, Device device);

// Out-of-range index check without a per-element host copy: kernels atomicMin the first bad
// position into a device word; check() copies that one word back and fails naming it.
class IndexCheck {
 public:
  explicit IndexCheck(Device device);
  unsigned long long* flag() const { return flag_; }
  // Returns the first offending position, or -1 when every index was in range.
  int64_t first_bad() const;

 private:
  TensorBase buffer_;
  unsigned long long* flag_;
  Device device_;
};

}  // namespace tessera::cuda
