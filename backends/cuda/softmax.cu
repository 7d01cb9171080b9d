// softmax / log_softmax over the last dim of a contiguous [rows, C] input (one warp per row
// up to 1024 wide, else one block per row), and their backward passes from the saved output.
#include "kernel_util.cuh"

namespace tessera::cuda {
namespace {

template <class T, bool kLog>
__global__ void softmax_kernel(const T* x, T* y, int64_t C) {
  using A = compute_t<T>;
  const T* xr = x + blockIdx.x * C;
  T* yr = y + blockIdx.x * C;
  A m = -INFINITY;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) m = max(m, A(load(xr[j])));
  m = block_reduce<kThreads>(m, MaxOp{});
  if (isinf(m) && m < 0) m = 0;  // an all -inf row: avoid inf - inf
  A s = 0;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) s += exp(A(load(xr[j])) - m);
  s = block_reduce<kThreads>(s, SumOp{});
  if constexpr (kLog) {
    const A lse = m + log(s);
    for (int64_t j = threadIdx.x; j < C; j += kThreads) yr[j] = convert<T>(A(load(xr[j])) - lse);
  } else {
    const A inv = A(1) / s;
    for (int64_t j = threadIdx.x; j < C; j += kThreads)
      yr[j] = convert<T>(exp(A(load(xr[j])) - m) * inv);
  }
}

// Rows that fit (8 per block in 48 KB): one warp per row, the row read once into shared memory.
constexpr int64_t kWarpSmemMax = 48 * 1024;  // default dynamic shared memory per block
constexpr int kWarpsPerBlock = 8;

template <class T, bool kLog>
__global__ void softmax_warp_kernel(const T* x, T* y, int64_t rows, int64_t C) {
  using A = compute_t<T>;
  extern __shared__ unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  A* cache = reinterpret_cast<A*>(smem_raw) + warp * C;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + warp;
  if (row >= rows) return;
  const T* xr = x + row * C;
  A m = -INFINITY;
  for (int64_t j = lane; j < C; j += 32) {
    const A v = load(xr[j]);
    cache[j] = v;
    m = max(m, v);
  }
  m = warp_reduce(m, MaxOp{});
  if (isinf(m) && m < 0) m = 0;
  A s = 0;
  for (int64_t j = lane; j < C; j += 32) s += exp(cache[j] - m);
  s = warp_reduce(s, SumOp{});
  T* yr = y + row * C;
  if constexpr (kLog) {
    const A lse = m + log(s);
    for (int64_t j = lane; j < C; j += 32) yr[j] = convert<T>(cache[j] - lse);
  } else {
    const A inv = A(1) / s;
    for (int64_t j = lane; j < C; j += 32) yr[j] = convert<T>(exp(cache[j] - m) * inv);
  }
}

// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
template <class T, bool kLog>
__global__ void softmax_backward_kernel(const T* g, const T* y, T* dx, int64_t C) {
  using A = compute_t<T>;
  const int64_t base = blockIdx.x * C;
  A s = 0;
  for (int64_t j = threadIdx.x; j < C; j += kThreads)
    s += kLog ? A(load(g[base + j])) : A(load(g[base + j])) * A(load(y[base + j]));
  s = block_reduce<kThreads>(s, SumOp{});
  for (int64_t j = threadIdx.x; j < C; j += kThreads) {
    const A gj = load(g[base + j]), yj = load(y[base + j]);
    dx[base + j] = convert<T>(kLog ? gj - exp(yj) * s : yj * (gj - s));
  }
}

int64_t rows_of(const TensorBase& x, int64_t& C) {
  C = x.shape().empty() ? 1 : x.shape().back();
  return C == 0 ? 0 : x.numel() / C;
}

template <class T, bool kLog>
struct Softmax {
  static void run(const KernelCall& c) {
    int64_t C;
    const int64_t rows = rows_of(c.inputs[0], C);
    if (rows == 0) return;
    if (C * static_cast<int64_t>(sizeof(compute_t<T>)) * kWarpsPerBlock <= kWarpSmemMax) {
      const auto blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
      softmax_warp_kernel<T, kLog>
          <<<blocks, kWarpsPerBlock * 32, kWarpsPerBlock * C * sizeof(compute_t<T>),
             stream_of(c.outputs[0])>>>(static_cast<const T*>(c.inputs[0].data_ptr()),
                                        static_cast<T*>(c.outputs[0].data_ptr()), rows, C);
      TS_CUDA_LAUNCH_CHECK("softmax");
      return;
    }
    softmax_kernel<T, kLog><<<static_cast<unsigned>(rows), kThreads, 0, stream_of(c.outputs[0])>>>(
        static_cast<const T*>(c.inputs[0].data_ptr()), static_cast<T*>(c.outputs[0].data_ptr()), C);
    TS_CUDA_LAUNCH_CHECK("softmax");
  }
};
template <class T, bool kLog>
struct SoftmaxBackward {
  static void run(const KernelCall& c) {
    int64_t C;
    const int64_t rows = rows_of(c.inputs[0], C);
    if (rows == 0) return;
    softmax_backward_kernel<T, kLog>
        <<<static_cast<unsigned>(rows), kThreads, 0, stream_of(c.outputs[0])>>>(
            static_cast<const T*>(c.inputs[0].data_ptr()),
            static_cast<const T*>(c.inputs[1].data_ptr()), static_cast<T*>(c.outputs[0].data_ptr()),
            C);
    TS_CUDA_LAUNCH_CHECK("softmax_backward");
  }
};
template <class T>
using SoftmaxK = Softmax<T, false>;
template <class T>
using LogSoftmaxK = Softmax<T, true>;
template <class T>
using SoftmaxBackwardK = SoftmaxBackward<T, false>;
template <class T>
using LogSoftmaxBackwardK = SoftmaxBackward<T, true>;

const bool registered = [] {
  register_floating<SoftmaxK>(Kernel::softmax);
  register_floating<LogSoftmaxK>(Kernel::log_softmax);
  register_floating<SoftmaxBackwardK>(Kernel::softmax_backward);
  register_floating<LogSoftmaxBackwardK>(Kernel::log_softmax_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
