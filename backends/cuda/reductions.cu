// Row reductions over a contiguous [outer, R] input (the op layer moves reduced dims last)
// into [outer]. Each row is cut into fixed chunks; a block reduces a chunk in a fixed tree
// order and a second kernel combines a row's chunks in order, so results are deterministic.
// Floating sums accumulate in double, as on the CPU.
#include <cmath>

#include "elementwise.cuh"

namespace tessera::cuda {
namespace {

constexpr int64_t kChunk = 32768;

template <class T>
using sum_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;

template <class T>
struct SumPolicy {
  using P = sum_t<T>;
  const double* mean = nullptr;  // set: sum of squared deviations from mean[row]
  __device__ P identity() const { return P(0); }
  __device__ P element(T x, int64_t, int64_t row) const {
    if constexpr (std::is_same_v<T, bool>) {
      return P(x ? 1 : 0);
    } else {
      const P v = static_cast<P>(load(x));
      if constexpr (std::is_floating_point_v<P>) {
        if (mean) {
          const P d = v - mean[row];
          return d * d;
        }
      }
      return v;
    }
  }
  __device__ P operator()(P a, P b) const { return a + b; }
};

// NaN wins (as in torch); kMax selects max or min.
template <class T, bool kMax>
struct ExtremePolicy {
  using P = compute_t<T>;
  __device__ P identity() const {
    if constexpr (std::is_floating_point_v<P>)
      return kMax ? P(-INFINITY) : P(INFINITY);
    else
      return kMax ? std::numeric_limits<P>::lowest() : std::numeric_limits<P>::max();
  }
  __device__ P element(T x, int64_t, int64_t) const { return load(x); }
  __device__ P operator()(P a, P b) const {
    if constexpr (std::is_floating_point_v<P>) {
      if (isnan(a)) return a;
      if (isnan(b)) return b;
    }
    return kMax ? (b > a ? b : a) : (b < a ? b : a);
  }
};

template <class C>
struct ValueIndex {
  C value;
  int64_t index;
};
// First maximum (lowest index among equals; first NaN if any).
template <class T>
struct ArgmaxPolicy {
  using C = compute_t<T>;
  using P = ValueIndex<C>;
  __device__ P identity() const {
    if constexpr (std::is_floating_point_v<C>)
      return {C(-INFINITY), INT64_MAX};
    else
      return {std::numeric_limits<C>::lowest(), INT64_MAX};
  }
  __device__ P element(T x, int64_t i, int64_t) const { return {load(x), i}; }
  __device__ P operator()(P a, P b) const {
    if constexpr (std::is_floating_point_v<C>) {
      const bool na = isnan(a.value), nb = isnan(b.value);
      if (na || nb) return na && nb ? (a.index < b.index ? a : b) : (na ? a : b);
    }
    if (b.value > a.value) return b;
    if (a.value > b.value) return a;
    return a.index < b.index ? a : b;
  }
};

template <class T, class Policy, class P = typename Policy::P>
__global__ void chunk_kernel(const T* x, int64_t R, int64_t nchunks, P* partial, Policy pol) {
  const int64_t row = blockIdx.x / nchunks, k = blockIdx.x % nchunks;
  const int64_t start = k * kChunk, len = min(kChunk, R - start);
  const T* p = x + row * R + start;
  P acc = pol.identity();
  int64_t i = threadIdx.x;
  constexpr int N = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
  if (N > 1 && reinterpret_cast<uintptr_t>(p) % 16 == 0) {
    // 16-byte loads: each thread takes whole packs, then the tail one by one.
    const int64_t packs = len / N;
    const auto* pv = reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll 2
    for (int64_t v = threadIdx.x; v < packs; v += kThreads) {
      const Pack<T, N> x = pv[v];
#pragma unroll
      for (int k = 0; k < N; ++k) acc = pol(acc, pol.element(x.v[k], start + v * N + k, row));
    }
    for (i = packs * N + threadIdx.x; i < len; i += kThreads)
      acc = pol(acc, pol.element(p[i], start + i, row));
    acc = block_reduce<kThreads>(acc, pol);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
    return;
  }
  // Four independent loads in flight per step.
  for (; i + 3 * kThreads < len; i += 4 * kThreads) {
    const P e0 = pol.element(p[i], start + i, row);
    const P e1 = pol.element(p[i + kThreads], start + i + kThreads, row);
    const P e2 = pol.element(p[i + 2 * kThreads], start + i + 2 * kThreads, row);
    const P e3 = pol.element(p[i + 3 * kThreads], start + i + 3 * kThreads, row);
    acc = pol(pol(pol(pol(acc, e0), e1), e2), e3);
  }
  for (; i < len; i += kThreads) acc = pol(acc, pol.element(p[i], start + i, row));
  acc = block_reduce<kThreads>(acc, pol);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Combines each row's chunk partials in order and hands the result to finish(row, P).
template <class P, class Policy, class Finish>
__global__ void combine_kernel(const P* partial, int64_t outer, int64_t nchunks, Policy pol,
                               Finish finish) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (row >= outer) return;
  P acc = partial[row * nchunks];
  for (int64_t k = 1; k < nchunks; ++k) acc = pol(acc, partial[row * nchunks + k]);
  finish(row, acc);
}

// The same with one block per row, for rows cut into many chunks (a full reduction of 2^26
// elements has 2048): thread t folds partials t, t + kThreads, ... in order, then the
// block's fixed tree combines the threads, so the order is still fixed. One thread walking
// 2048 partials serially took longer than reading the 256 MB input.
template <class P, class Policy, class Finish>
__global__ void combine_row_block_kernel(const P* partial, int64_t nchunks, Policy pol,
                                         Finish finish) {
  const int64_t row = blockIdx.x;
  const P* p = partial + row * nchunks;
  P acc = pol.identity();
  for (int64_t k = threadIdx.x; k < nchunks; k += kThreads) acc = pol(acc, p[k]);
  acc = block_reduce<kThreads>(acc, pol);
  if (threadIdx.x == 0) finish(row, acc);
}
constexpr int64_t kBlockCombineChunks = 16;  // from this many chunks per row

template <class T, class Policy, class Finish>
void reduce_rows(const KernelCall& c, Policy pol, Finish finish) {
  using P = typename Policy::P;
  const TensorBase& x = c.inputs[0];
  const int64_t outer = x.shape()[0], R = x.shape()[1];
  if (outer == 0) return;
  const int64_t nchunks = std::max<int64_t>(1, (R + kChunk - 1) / kChunk);
  TensorBase part = scratch(outer * nchunks * static_cast<int64_t>(sizeof(P)), x.device());
  cudaStream_t stream = stream_of(x);
  chunk_kernel<T, Policy><<<static_cast<unsigned>(outer * nchunks), kThreads, 0, stream>>>(
      static_cast<const T*>(x.data_ptr()), R, nchunks, static_cast<P*>(part.data_ptr()), pol);
  TS_CUDA_LAUNCH_CHECK("reduce");
  const P* partials = static_cast<const P*>(part.data_ptr());
  if (nchunks >= kBlockCombineChunks)
    combine_row_block_kernel<<<static_cast<unsigned>(outer), kThreads, 0, stream>>>(
        partials, nchunks, pol, finish);
  else
    combine_kernel<<<grid_for(outer), kThreads, 0, stream>>>(partials, outer, nchunks, pol, finish);
  TS_CUDA_LAUNCH_CHECK("reduce combine");
}

template <class O, class P>
struct StoreSum {
  O* y;
  __device__ void operator()(int64_t row, P v) const {
    y[row] = convert<O>(static_cast<compute_t<O>>(v));
  }
};

template <class T>
struct Sum {
  static void run(const KernelCall& c) {
    TensorBase& out = c.outputs[0];
    visit_dtype(out.dtype(), [&]<class O>() {
      reduce_rows<T>(c, SumPolicy<T>{}, StoreSum<O, sum_t<T>>{static_cast<O*>(out.data_ptr())});
    });
  }
};

template <class T, class P>
struct StoreValue {
  T* y;
  __device__ void operator()(int64_t row, P v) const { y[row] = convert<T>(v); }
};

template <class T, bool kMax>
struct Extreme {
  static void run(const KernelCall& c) {
    TS_CHECK(c.inputs[0].shape()[1] > 0, kMax ? "max" : "min",
             ": cannot reduce over an empty dimension");
    reduce_rows<T>(c, ExtremePolicy<T, kMax>{},
                   StoreValue<T, compute_t<T>>{static_cast<T*>(c.outputs[0].data_ptr())});
  }
};
template <class T>
using Max = Extreme<T, true>;
template <class T>
using Min = Extreme<T, false>;

template <class C>
struct StoreIndex {
  int64_t* y;
  __device__ void operator()(int64_t row, ValueIndex<C> v) const { y[row] = v.index; }
};
template <class T>
struct Argmax {
  static void run(const KernelCall& c) {
    TS_CHECK(c.inputs[0].shape()[1] > 0, "argmax: cannot reduce over an empty dimension");
    reduce_rows<T>(c, ArgmaxPolicy<T>{},
                   StoreIndex<compute_t<T>>{static_cast<int64_t*>(c.outputs[0].data_ptr())});
  }
};

struct StoreMean {
  double* mean;
  double R;
  __device__ void operator()(int64_t row, double v) const { mean[row] = v / R; }
};
template <class T, bool kNorm>
struct StoreSquareSum {
  T* y;
  double denom;
  __device__ void operator()(int64_t row, double v) const {
    if constexpr (kNorm)
      y[row] = convert<T>(static_cast<compute_t<T>>(sqrt(v)));
    else
      y[row] = convert<T>(static_cast<compute_t<T>>(denom > 0 ? v / denom : NAN));
  }
};

// attrs.index: Bessel correction. Variance subtracts the row mean first (two passes, as on
// the CPU); the norm is the square root of the sum of squares.
template <class T, bool kNorm>
struct SquareSum {
  static void run(const KernelCall& c) {
    const TensorBase& x = c.inputs[0];
    const int64_t outer = x.shape()[0], R = x.shape()[1];
    TensorBase mean = scratch(outer * 8, x.device());
    double* m = static_cast<double*>(mean.data_ptr());
    if (kNorm) {
      TS_CUDA_CHECK(cudaMemsetAsync(m, 0, outer * 8, stream_of(x)));
    } else {
      reduce_rows<T>(c, SumPolicy<T>{}, StoreMean{m, static_cast<double>(R)});
    }
    reduce_rows<T>(c, SumPolicy<T>{m},
                   StoreSquareSum<T, kNorm>{static_cast<T*>(c.outputs[0].data_ptr()),
                                            static_cast<double>(R - c.attrs.index)});
  }
};
template <class T>
using Var = SquareSum<T, false>;
template <class T>
using Norm = SquareSum<T, true>;

const bool registered = [] {
  register_all<Sum>(Kernel::sum);
  register_numeric<Max>(Kernel::max);
  register_numeric<Min>(Kernel::min);
  register_numeric<Argmax>(Kernel::argmax);
  register_floating<Var>(Kernel::var);
  register_floating<Norm>(Kernel::norm);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
