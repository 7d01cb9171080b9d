// Scaled-dot-product attention from cuBLASLt products and our own row kernels (the math
// path): S = scale Q K^T in float32 (float64 for float64), a masked softmax that also gives
// the log-sum-exp, O = P V. Backward rebuilds P from S and the saved log-sum-exp, as the
// CPU kernel does, so the two agree to rounding. Same contract as the CPU kernel:
// forward  inputs: q [B,H,Tq,D], k [B,H,Tk,D], v [B,H,Tk,Dv] (contiguous), mask (optional
//          bool, broadcast view of [B,H,Tq,Tk], true = attend); attrs.flag = causal,
//          attrs.scalar = scale; outputs: o, lse [B,H,Tq] (compute type; -inf when fully masked)
// backward inputs: dO, q, k, v, o, lse, mask; outputs: dq, dk, dv
// float16/bfloat16 with head size 64 or 128 take the fused path instead
// (flash_attention_forward.cu, flash_attention_backward.cu); here the score matrices take
// B*H*Tq*Tk elements each while a step runs.
#include "attention_mask.cuh"
#include "flash_attention.h"
#include "gemm.h"
#include "kernel_util.cuh"

namespace tessera::cuda {
namespace {

struct Dims {
  int64_t B, H, Tq, Tk, D, Dv;
};

// One block per query row: P = softmax(S) over visible keys, lse = log-sum-exp.
template <class T, class A>
__global__ void attention_probs_kernel(const A* S, T* P, A* lse, MaskView mask, bool causal,
                                       int64_t Tq, int64_t Tk) {
  const int64_t row = blockIdx.x, bh = row / Tq, i = row % Tq;
  const A* s = S + row * Tk;
  T* p = P + row * Tk;
  A m = -INFINITY;
  for (int64_t j = threadIdx.x; j < Tk; j += kThreads)
    if (visible(mask, causal, bh, i, j, Tq, Tk)) m = max(m, s[j]);
  m = block_reduce<kThreads>(m, MaxOp{});
  if (isinf(m) && m < 0) {  // every key masked: output 0 rather than NaN
    for (int64_t j = threadIdx.x; j < Tk; j += kThreads) p[j] = convert<T>(A(0));
    if (threadIdx.x == 0) lse[row] = -INFINITY;
    return;
  }
  A sum = 0;
  for (int64_t j = threadIdx.x; j < Tk; j += kThreads)
    if (visible(mask, causal, bh, i, j, Tq, Tk)) sum += exp(s[j] - m);
  sum = block_reduce<kThreads>(sum, SumOp{});
  const A l = m + log(sum);
  for (int64_t j = threadIdx.x; j < Tk; j += kThreads)
    p[j] = convert<T>(visible(mask, causal, bh, i, j, Tq, Tk) ? exp(s[j] - l) : A(0));
  if (threadIdx.x == 0) lse[row] = l;
}

// The same with one warp per row when 8 rows fit in 48 KB: the row of S is read once.
constexpr int64_t kWarpSmemMax = 48 * 1024;  // default dynamic shared memory per block
constexpr int kWarpsPerBlock = 8;

template <class T, class A>
__global__ void attention_probs_warp_kernel(const A* S, T* P, A* lse, MaskView mask, bool causal,
                                            int64_t rows, int64_t Tq, int64_t Tk) {
  extern __shared__ unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  A* cache = reinterpret_cast<A*>(smem_raw) + warp * Tk;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + warp;
  if (row >= rows) return;
  const int64_t bh = row / Tq, i = row % Tq;
  const A* s = S + row * Tk;
  T* p = P + row * Tk;
  A m = -INFINITY;
  for (int64_t j = lane; j < Tk; j += 32) {
    const A v = visible(mask, causal, bh, i, j, Tq, Tk) ? s[j] : A(-INFINITY);
    cache[j] = v;
    m = max(m, v);
  }
  m = warp_reduce(m, MaxOp{});
  if (isinf(m) && m < 0) {
    for (int64_t j = lane; j < Tk; j += 32) p[j] = convert<T>(A(0));
    if (lane == 0) lse[row] = -INFINITY;
    return;
  }
  A sum = 0;
  for (int64_t j = lane; j < Tk; j += 32) sum += exp(cache[j] - m);  // exp(-inf) = 0
  sum = warp_reduce(sum, SumOp{});
  const A l = m + log(sum);
  for (int64_t j = lane; j < Tk; j += 32) p[j] = convert<T>(exp(cache[j] - l));
  if (lane == 0) lse[row] = l;
}

// Backward, one block per query row: P from S and lse; dS = P * (dP - sum(dO * O)) * scale.
template <class T, class A>
__global__ void attention_grad_scores_kernel(const A* S, const A* dP, const A* lse, const T* dO,
                                             const T* O, T* P, T* dS, MaskView mask, bool causal,
                                             int64_t Tq, int64_t Tk, int64_t Dv, A scale) {
  const int64_t row = blockIdx.x, bh = row / Tq, i = row % Tq;
  A d = 0;
  for (int64_t c = threadIdx.x; c < Dv; c += kThreads)
    d += A(load(dO[row * Dv + c])) * A(load(O[row * Dv + c]));
  d = block_reduce<kThreads>(d, SumOp{});
  const A l = lse[row];
  for (int64_t j = threadIdx.x; j < Tk; j += kThreads) {
    const int64_t at = row * Tk + j;
    const A pj = (isinf(l) || !visible(mask, causal, bh, i, j, Tq, Tk)) ? A(0) : exp(S[at] - l);
    P[at] = convert<T>(pj);
    dS[at] = convert<T>(pj * (dP[at] - d) * scale);
  }
}

template <class A>
__global__ void fill_ninf_kernel(A* p, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) p[i] = -INFINITY;
}

Dims dims_of(const TensorBase& q, const TensorBase& k, const TensorBase& v) {
  return {q.shape()[0], q.shape()[1], q.shape()[2], k.shape()[2], q.shape()[3], v.shape()[3]};
}

GemmOperand plain(const void* p, int64_t rows, int64_t cols) {
  return {p, cols, rows * cols, false};
}
GemmOperand transposed(const void* p, int64_t rows, int64_t cols) {
  // the [cols, rows] transpose of a contiguous [rows, cols] matrix
  return {p, cols, rows * cols, true};
}

template <class T>
struct Attention {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const TensorBase &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
    const Dims s = dims_of(q, k, v);
    const int64_t BH = s.B * s.H;
    const Device dev = q.device();
    cudaStream_t stream = stream_of(q);
    if (BH * s.Tq == 0) return;
    if (s.Tk == 0) {
      TS_CUDA_CHECK(cudaMemsetAsync(c.outputs[0].data_ptr(), 0, c.outputs[0].nbytes(), stream));
      fill_ninf_kernel<A><<<grid_for(BH * s.Tq), kThreads, 0, stream>>>(
          static_cast<A*>(c.outputs[1].data_ptr()), BH * s.Tq);
      TS_CUDA_LAUNCH_CHECK("attention");
      return;
    }
    const TensorBase mask = c.inputs.size() > 3 ? c.inputs[3] : TensorBase();
    if (flash_attention_supported(q, k, v)) {
      flash_attention_forward(q, k, v, mask_view(mask, s.H), c.attrs.flag,
                              static_cast<float>(c.attrs.scalar), c.outputs[0], c.outputs[1]);
      return;
    }
    const cudaDataType_t t = cuda_type(q.dtype()), ta = sizeof(A) == 8 ? CUDA_R_64F : CUDA_R_32F;
    TensorBase S = scratch(BH * s.Tq * s.Tk * static_cast<int64_t>(sizeof(A)), dev);
    TensorBase P = scratch(BH * s.Tq * s.Tk * static_cast<int64_t>(sizeof(T)), dev);
    gemm(dev, t, ta, BH, s.Tq, s.Tk, s.D, plain(q.data_ptr(), s.Tq, s.D),
         transposed(k.data_ptr(), s.Tk, s.D), S.data_ptr(), s.Tk, s.Tq * s.Tk, c.attrs.scalar);
    if (s.Tk * static_cast<int64_t>(sizeof(A)) * kWarpsPerBlock <= kWarpSmemMax) {
      const int64_t rows = BH * s.Tq;
      attention_probs_warp_kernel<T, A>
          <<<static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
             kWarpsPerBlock * 32, kWarpsPerBlock * s.Tk * sizeof(A), stream>>>(
              static_cast<const A*>(S.data_ptr()), static_cast<T*>(P.data_ptr()),
              static_cast<A*>(c.outputs[1].data_ptr()), mask_view(mask, s.H), c.attrs.flag, rows,
              s.Tq, s.Tk);
    } else {
      attention_probs_kernel<T, A><<<static_cast<unsigned>(BH * s.Tq), kThreads, 0, stream>>>(
          static_cast<const A*>(S.data_ptr()), static_cast<T*>(P.data_ptr()),
          static_cast<A*>(c.outputs[1].data_ptr()), mask_view(mask, s.H), c.attrs.flag, s.Tq, s.Tk);
    }
    TS_CUDA_LAUNCH_CHECK("attention");
    gemm(dev, t, t, BH, s.Tq, s.Dv, s.Tk, plain(P.data_ptr(), s.Tq, s.Tk),
         plain(v.data_ptr(), s.Tk, s.Dv), c.outputs[0].data_ptr(), s.Dv, s.Tq * s.Dv);
  }
};

template <class T>
struct AttentionBackward {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const TensorBase &dO = c.inputs[0], &q = c.inputs[1], &k = c.inputs[2], &v = c.inputs[3];
    const TensorBase &o = c.inputs[4], &lse = c.inputs[5];
    const TensorBase mask = c.inputs.size() > 6 ? c.inputs[6] : TensorBase();
    const Dims s = dims_of(q, k, v);
    const int64_t BH = s.B * s.H;
    const Device dev = q.device();
    cudaStream_t stream = stream_of(q);
    TensorBase &dq = c.outputs[0], &dk = c.outputs[1], &dv = c.outputs[2];
    if (BH * s.Tq == 0 || s.Tk == 0) {
      for (TensorBase* t : {&dq, &dk, &dv})
        TS_CUDA_CHECK(cudaMemsetAsync(t->data_ptr(), 0, t->nbytes(), stream));
      return;
    }
    if (flash_attention_supported(q, k, v)) {
      flash_attention_backward(dO, q, k, v, o, lse, mask_view(mask, s.H), c.attrs.flag,
                               static_cast<float>(c.attrs.scalar), dq, dk, dv);
      return;
    }
    const cudaDataType_t t = cuda_type(q.dtype()), ta = sizeof(A) == 8 ? CUDA_R_64F : CUDA_R_32F;
    const int64_t n = BH * s.Tq * s.Tk;
    TensorBase S = scratch(n * static_cast<int64_t>(sizeof(A)), dev);
    TensorBase dP = scratch(n * static_cast<int64_t>(sizeof(A)), dev);
    TensorBase P = scratch(n * static_cast<int64_t>(sizeof(T)), dev);
    TensorBase dS = scratch(n * static_cast<int64_t>(sizeof(T)), dev);
    gemm(dev, t, ta, BH, s.Tq, s.Tk, s.D, plain(q.data_ptr(), s.Tq, s.D),
         transposed(k.data_ptr(), s.Tk, s.D), S.data_ptr(), s.Tk, s.Tq * s.Tk, c.attrs.scalar);
    gemm(dev, t, ta, BH, s.Tq, s.Tk, s.Dv, plain(dO.data_ptr(), s.Tq, s.Dv),
         transposed(v.data_ptr(), s.Tk, s.Dv), dP.data_ptr(), s.Tk, s.Tq * s.Tk);
    attention_grad_scores_kernel<T, A><<<static_cast<unsigned>(BH * s.Tq), kThreads, 0, stream>>>(
        static_cast<const A*>(S.data_ptr()), static_cast<const A*>(dP.data_ptr()),
        static_cast<const A*>(lse.data_ptr()), static_cast<const T*>(dO.data_ptr()),
        static_cast<const T*>(o.data_ptr()), static_cast<T*>(P.data_ptr()),
        static_cast<T*>(dS.data_ptr()), mask_view(mask, s.H), c.attrs.flag, s.Tq, s.Tk, s.Dv,
        static_cast<A>(c.attrs.scalar));
    TS_CUDA_LAUNCH_CHECK("attention_backward");
    // dV = P^T dO, dQ = dS K, dK = dS^T Q
    gemm(dev, t, t, BH, s.Tk, s.Dv, s.Tq, transposed(P.data_ptr(), s.Tq, s.Tk),
         plain(dO.data_ptr(), s.Tq, s.Dv), dv.data_ptr(), s.Dv, s.Tk * s.Dv);
    gemm(dev, t, t, BH, s.Tq, s.D, s.Tk, plain(dS.data_ptr(), s.Tq, s.Tk),
         plain(k.data_ptr(), s.Tk, s.D), dq.data_ptr(), s.D, s.Tq * s.D);
    gemm(dev, t, t, BH, s.Tk, s.D, s.Tq, transposed(dS.data_ptr(), s.Tq, s.Tk),
         plain(q.data_ptr(), s.Tq, s.D), dk.data_ptr(), s.D, s.Tk * s.D);
  }
};

const bool registered = [] {
  register_floating<Attention>(Kernel::attention);
  register_floating<AttentionBackward>(Kernel::attention_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
