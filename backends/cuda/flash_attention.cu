// Flash-style attention (Dao et al., FlashAttention-2) with WMMA tensor-core fragments.
// A block is 4 warps; each warp owns 16 rows of a 64-row tile. Forward: per query tile, loop
// over key tiles keeping a running max and sum per row; S and P live in shared memory only.
// Backward, deterministically without atomics: one kernel per key tile accumulates dK and dV
// over query tiles; a second per query tile accumulates dQ over key tiles (scores rebuilt
// from the saved log-sum-exp in both). P and dS are rounded to the input type before their
// products, as in FlashAttention; every sum is in float32.
#include <mma.h>

#include <cstdlib>

#include "backends/cuda/flash_attention.h"
#include "backends/cuda/kernel_util.cuh"

namespace tessera::cuda {
namespace {

using namespace nvcuda;

constexpr int kTile = 64;  // rows of a query tile and keys of a key tile
constexpr int kWarps = 4;
constexpr int kBlockThreads = kWarps * 32;

template <class T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <class T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

struct Args {
  const void *q, *k, *v, *o, *dO;
  void *out, *dq, *dk, *dv;
  float* lse;
  const float* lse_in;
  const float* dvec;
  MaskView mask;
  bool causal;
  int64_t Tq, Tk;
  float scale;
};

// Loads rows [r0, r0 + 64) of a [rows, D] matrix into shared memory, zeros past `rows`.
template <class T, int D>
__device__ void load_tile(T* dst, const T* src, int64_t r0, int64_t rows) {
  for (int idx = threadIdx.x; idx < kTile * D; idx += kBlockThreads) {
    const int r = idx / D;
    dst[idx] = r0 + r < rows ? src[(r0 + r) * D + idx % D] : convert<T>(0.0f);
  }
}

// C[16 x 64] (float, ld 64) = A[16 x D] (row-major, ld D) * B^T where B is [64 x D] row-major.
template <class T, int D>
__device__ void mm_abt(float* C, const T* A, const T* B) {
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA<T> a;
      FragBCol<T> b;
      wmma::load_matrix_sync(a, A + kk * 16, D);
      wmma::load_matrix_sync(b, B + n * 16 * D + kk * 16, D);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + n * 16, acc, kTile, wmma::mem_row_major);
  }
}

// acc[n] += P[16 x 64] (row-major, ld 64) * V[64 x D] (row-major, ld D), for D/16 column blocks.
template <class T, int D>
__device__ void mm_acc(FragC (&acc)[D / 16], const T* P, const T* V) {
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      FragA<T> a;
      FragBRow<T> b;
      wmma::load_matrix_sync(a, P + kk * 16, kTile);
      wmma::load_matrix_sync(b, V + kk * 16 * D + n * 16, D);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
}

template <class T, int D>
__device__ void store_rows(T* dst, int64_t r0, int64_t rows, FragC (&acc)[D / 16], float* stage) {
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(stage + n * 16, acc[n], D, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int idx = lane; idx < 16 * D; idx += 32) {
    const int r = idx / D;
    if (r0 + r < rows) dst[(r0 + r) * D + idx % D] = convert<T>(stage[idx]);
  }
}

// Forward shared memory: Q, K, V tiles; per warp S (float), P (T), O (float) for its 16 rows
// and their running max and sum.
template <class T, int D>
struct FwdSmem {
  static constexpr size_t q = 0, k = q + kTile * D * sizeof(T), v = k + kTile * D * sizeof(T);
  static constexpr size_t s = v + kTile * D * sizeof(T);
  static constexpr size_t p = s + kWarps * 16 * kTile * sizeof(float);
  static constexpr size_t o = p + kWarps * 16 * kTile * sizeof(T);
  static constexpr size_t m = o + kWarps * 16 * D * sizeof(float);
  static constexpr size_t l = m + kWarps * 16 * sizeof(float);
  static constexpr size_t bytes = l + kWarps * 16 * sizeof(float);
};

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) flash_fwd_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  using L = FwdSmem<T, D>;
  T* Qs = reinterpret_cast<T*>(smem + L::q);
  T* Ks = reinterpret_cast<T*>(smem + L::k);
  T* Vs = reinterpret_cast<T*>(smem + L::v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* Sw = reinterpret_cast<float*>(smem + L::s) + warp * 16 * kTile;
  T* Pw = reinterpret_cast<T*>(smem + L::p) + warp * 16 * kTile;
  float* Ow = reinterpret_cast<float*>(smem + L::o) + warp * 16 * D;
  float* mw = reinterpret_cast<float*>(smem + L::m) + warp * 16;
  float* lw = reinterpret_cast<float*>(smem + L::l) + warp * 16;

  const int64_t bh = blockIdx.y, q0 = int64_t{blockIdx.x} * kTile, Tq = a.Tq, Tk = a.Tk;
  const T* Q = static_cast<const T*>(a.q) + bh * Tq * D;
  const T* K = static_cast<const T*>(a.k) + bh * Tk * D;
  const T* V = static_cast<const T*>(a.v) + bh * Tk * D;
  load_tile<T, D>(Qs, Q, q0, Tq);
  for (int idx = lane; idx < 16 * D; idx += 32) Ow[idx] = 0.0f;
  if (lane < 16) {
    mw[lane] = -INFINITY;
    lw[lane] = 0.0f;
  }
  int64_t kend = Tk;
  if (a.causal) kend = max(int64_t{0}, min(Tk, q0 + kTile + Tk - Tq));
  const int r = lane >> 1, half = lane & 1;
  const int64_t i = q0 + warp * 16 + r;
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Ks, K, k0, Tk);
    load_tile<T, D>(Vs, V, k0, Tk);
    __syncthreads();
    mm_abt<T, D>(Sw, Qs + warp * 16 * D, Ks);
    __syncwarp();
    // Online softmax: two lanes per row, 32 columns each.
    float s[32];
    float mx = -INFINITY;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const int64_t j = k0 + half * 32 + c;
      float v = Sw[r * kTile + half * 32 + c] * a.scale;
      if (i >= Tq || j >= Tk || !visible(a.mask, a.causal, bh, i, j, Tq, Tk)) v = -INFINITY;
      s[c] = v;
      mx = fmaxf(mx, v);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float m_old = mw[r], m_new = fmaxf(m_old, mx);
    const bool none = m_new == -INFINITY;
    const float alpha = none ? 1.0f : __expf(m_old - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < 32; ++c) {
      const float p = none ? 0.0f : __expf(s[c] - m_new);
      Pw[r * kTile + half * 32 + c] = convert<T>(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    for (int c = 0; c < D / 2; ++c) Ow[r * D + half * (D / 2) + c] *= alpha;
    __syncwarp();
    if (half == 0) {
      mw[r] = m_new;
      lw[r] = lw[r] * alpha + sum;
    }
    __syncwarp();
    FragC acc[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::load_matrix_sync(acc[n], Ow + n * 16, D, wmma::mem_row_major);
    mm_acc<T, D>(acc, Pw, Vs);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::store_matrix_sync(Ow + n * 16, acc[n], D, wmma::mem_row_major);
    __syncwarp();
  }
  if (i < Tq) {
    const float l = lw[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* O = static_cast<T*>(a.out) + (bh * Tq + i) * D;
    for (int c = 0; c < D / 2; ++c) O[half * (D / 2) + c] = convert<T>(Ow[r * D + half * (D / 2) + c] * inv);
    if (half == 0) a.lse[bh * Tq + i] = l > 0.0f ? mw[r] + logf(l) : -INFINITY;
  }
}

// dvec[row] = sum_d dO[row, d] * O[row, d], one warp per row.
template <class T>
__global__ void dvec_kernel(const T* dO, const T* O, float* dvec, int64_t rows, int64_t D) {
  const int64_t row = blockIdx.x * int64_t{kBlockThreads / 32} + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  float s = 0.0f;
  for (int64_t c = lane; c < D; c += 32) s += float(load(dO[row * D + c])) * float(load(O[row * D + c]));
  s = warp_reduce(s, SumOp{});
  if (lane == 0) dvec[row] = s;
}

// p and dS for score (already in S), dP, query i, key j.
__device__ inline void grad_entry(float sc, float dp, float lse, float dv, bool vis, float scale,
                                  float& p, float& ds) {
  p = (vis && isfinite(lse)) ? __expf(sc * scale - lse) : 0.0f;
  ds = p * (dp - dv) * scale;
}

template <class T, int D>
struct BwdSmem {
  // four [64 x D] tiles, per warp two float [16 x 64] and two T [16 x 64], lse/dvec per row
  static constexpr size_t bytes = 4 * kTile * D * sizeof(T) + kWarps * 2 * 16 * kTile * 4 +
                                  kWarps * 2 * 16 * kTile * sizeof(T) + 2 * kTile * 4;
};

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) flash_bwd_dkdv_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kTile * D;
  T* Qs = Vs + kTile * D;
  T* dOs = Qs + kTile * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* fbase = reinterpret_cast<float*>(dOs + kTile * D);
  float* Sw = fbase + warp * 2 * 16 * kTile;  // S^T, then dP^T beside it
  float* dPw = Sw + 16 * kTile;
  T* tbase = reinterpret_cast<T*>(fbase + kWarps * 2 * 16 * kTile);
  T* Pw = tbase + warp * 2 * 16 * kTile;
  T* dSw = Pw + 16 * kTile;
  float* lse_s = reinterpret_cast<float*>(tbase + kWarps * 2 * 16 * kTile);
  float* dvec_s = lse_s + kTile;

  const int64_t bh = blockIdx.y, k0 = int64_t{blockIdx.x} * kTile, Tq = a.Tq, Tk = a.Tk;
  const T* Q = static_cast<const T*>(a.q) + bh * Tq * D;
  const T* K = static_cast<const T*>(a.k) + bh * Tk * D;
  const T* V = static_cast<const T*>(a.v) + bh * Tk * D;
  const T* dO = static_cast<const T*>(a.dO) + bh * Tq * D;
  load_tile<T, D>(Ks, K, k0, Tk);
  load_tile<T, D>(Vs, V, k0, Tk);
  FragC dk[D / 16], dv[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }
  int64_t qstart = 0;
  if (a.causal) qstart = max(int64_t{0}, k0 - (Tk - Tq)) / kTile * kTile;
  const int r = lane >> 1, half = lane & 1;
  const int64_t j = k0 + warp * 16 + r;
  for (int64_t q0 = qstart; q0 < Tq; q0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Qs, Q, q0, Tq);
    load_tile<T, D>(dOs, dO, q0, Tq);
    for (int t = threadIdx.x; t < kTile; t += kBlockThreads) {
      const bool in = q0 + t < Tq;
      lse_s[t] = in ? a.lse_in[bh * Tq + q0 + t] : INFINITY;
      dvec_s[t] = in ? a.dvec[bh * Tq + q0 + t] : 0.0f;
    }
    __syncthreads();
    mm_abt<T, D>(Sw, Ks + warp * 16 * D, Qs);    // S^T rows = keys
    mm_abt<T, D>(dPw, Vs + warp * 16 * D, dOs);  // dP^T
    __syncwarp();
#pragma unroll 4
    for (int c = 0; c < 32; ++c) {
      const int q = half * 32 + c;
      const int64_t i = q0 + q;
      const bool vis = i < Tq && j < Tk && visible(a.mask, a.causal, bh, i, j, Tq, Tk);
      float p, ds;
      grad_entry(Sw[r * kTile + q], dPw[r * kTile + q], lse_s[q], dvec_s[q], vis, a.scale, p, ds);
      Pw[r * kTile + q] = convert<T>(p);
      dSw[r * kTile + q] = convert<T>(ds);
    }
    __syncwarp();
    mm_acc<T, D>(dv, Pw, dOs);  // dV += P^T dO
    mm_acc<T, D>(dk, dSw, Qs);  // dK += dS^T Q
  }
  __syncwarp();
  const int64_t r0 = k0 + warp * 16;
  store_rows<T, D>(static_cast<T*>(a.dk) + bh * Tk * D, r0, Tk, dk, Sw);
  __syncwarp();
  store_rows<T, D>(static_cast<T*>(a.dv) + bh * Tk * D, r0, Tk, dv, Sw);
}

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) flash_bwd_dq_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  T* Qs = reinterpret_cast<T*>(smem);
  T* dOs = Qs + kTile * D;
  T* Ks = dOs + kTile * D;
  T* Vs = Ks + kTile * D;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* fbase = reinterpret_cast<float*>(Vs + kTile * D);
  float* Sw = fbase + warp * 2 * 16 * kTile;
  float* dPw = Sw + 16 * kTile;
  T* tbase = reinterpret_cast<T*>(fbase + kWarps * 2 * 16 * kTile);
  T* dSw = tbase + warp * 2 * 16 * kTile;
  float* lse_s = reinterpret_cast<float*>(tbase + kWarps * 2 * 16 * kTile);
  float* dvec_s = lse_s + kTile;

  const int64_t bh = blockIdx.y, q0 = int64_t{blockIdx.x} * kTile, Tq = a.Tq, Tk = a.Tk;
  const T* Q = static_cast<const T*>(a.q) + bh * Tq * D;
  const T* K = static_cast<const T*>(a.k) + bh * Tk * D;
  const T* V = static_cast<const T*>(a.v) + bh * Tk * D;
  const T* dO = static_cast<const T*>(a.dO) + bh * Tq * D;
  load_tile<T, D>(Qs, Q, q0, Tq);
  load_tile<T, D>(dOs, dO, q0, Tq);
  for (int t = threadIdx.x; t < kTile; t += kBlockThreads) {
    const bool in = q0 + t < Tq;
    lse_s[t] = in ? a.lse_in[bh * Tq + q0 + t] : INFINITY;
    dvec_s[t] = in ? a.dvec[bh * Tq + q0 + t] : 0.0f;
  }
  FragC dq[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq[n], 0.0f);
  int64_t kend = Tk;
  if (a.causal) kend = max(int64_t{0}, min(Tk, q0 + kTile + Tk - Tq));
  const int r = lane >> 1, half = lane & 1;
  const int64_t i = q0 + warp * 16 + r;
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Ks, K, k0, Tk);
    load_tile<T, D>(Vs, V, k0, Tk);
    __syncthreads();
    mm_abt<T, D>(Sw, Qs + warp * 16 * D, Ks);
    mm_abt<T, D>(dPw, dOs + warp * 16 * D, Vs);
    __syncwarp();
    const float l = lse_s[warp * 16 + r], dvv = dvec_s[warp * 16 + r];
#pragma unroll 4
    for (int c = 0; c < 32; ++c) {
      const int kc = half * 32 + c;
      const int64_t j = k0 + kc;
      const bool vis = i < Tq && j < Tk && visible(a.mask, a.causal, bh, i, j, Tq, Tk);
      float p, ds;
      grad_entry(Sw[r * kTile + kc], dPw[r * kTile + kc], l, dvv, vis, a.scale, p, ds);
      dSw[r * kTile + kc] = convert<T>(ds);
    }
    __syncwarp();
    mm_acc<T, D>(dq, dSw, Ks);  // dQ += dS K
  }
  __syncwarp();
  store_rows<T, D>(static_cast<T*>(a.dq) + bh * Tq * D, q0 + warp * 16, Tq, dq, Sw);
}

template <class Kernel>
void allow_smem(Kernel k, size_t bytes) {
  TS_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
}

template <class T, int D>
void forward(const Args& a, int64_t BH, cudaStream_t stream) {
  constexpr size_t bytes = FwdSmem<T, D>::bytes;
  static const bool ready = (allow_smem(flash_fwd_kernel<T, D>, bytes), true);
  (void)ready;
  const dim3 grid(static_cast<unsigned>((a.Tq + kTile - 1) / kTile), static_cast<unsigned>(BH));
  flash_fwd_kernel<T, D><<<grid, kBlockThreads, bytes, stream>>>(a);
  TS_CUDA_LAUNCH_CHECK("flash attention");
}

template <class T, int D>
void backward(const Args& a, int64_t BH, cudaStream_t stream) {
  constexpr size_t bytes = BwdSmem<T, D>::bytes;
  static const bool ready =
      (allow_smem(flash_bwd_dkdv_kernel<T, D>, bytes), allow_smem(flash_bwd_dq_kernel<T, D>, bytes), true);
  (void)ready;
  const dim3 gk(static_cast<unsigned>((a.Tk + kTile - 1) / kTile), static_cast<unsigned>(BH));
  flash_bwd_dkdv_kernel<T, D><<<gk, kBlockThreads, bytes, stream>>>(a);
  const dim3 gq(static_cast<unsigned>((a.Tq + kTile - 1) / kTile), static_cast<unsigned>(BH));
  flash_bwd_dq_kernel<T, D><<<gq, kBlockThreads, bytes, stream>>>(a);
  TS_CUDA_LAUNCH_CHECK("flash attention backward");
}

template <class F>
void dispatch(DType dt, int64_t D, F&& f) {
  if (dt == DType::BFloat16) {
    if (D == 64) return f.template operator()<BFloat16, 64>();
    return f.template operator()<BFloat16, 128>();
  }
  if (D == 64) return f.template operator()<Half, 64>();
  return f.template operator()<Half, 128>();
}

}  // namespace

bool flash_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v) {
  const DType dt = q.dtype();
  const int64_t D = q.shape()[3];
  return (dt == DType::BFloat16 || dt == DType::Float16) && (D == 64 || D == 128) &&
         k.shape()[3] == D && v.shape()[3] == D && q.shape()[0] * q.shape()[1] <= 65535 &&
         q.shape()[2] > 0 && k.shape()[2] > 0 && std::getenv("TESSERA_ATTENTION_MATH") == nullptr;
}

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const MaskView& mask, bool causal, float scale, Tensor& o,
                             Tensor& lse) {
  Args a{};
  a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.out = o.data_ptr();
  a.lse = static_cast<float*>(lse.data_ptr());
  a.mask = mask, a.causal = causal, a.Tq = q.shape()[2], a.Tk = k.shape()[2], a.scale = scale;
  const int64_t BH = q.shape()[0] * q.shape()[1];
  dispatch(q.dtype(), q.shape()[3],
           [&]<class T, int D>() { forward<T, D>(a, BH, stream_of(q)); });
}

void flash_attention_backward(const Tensor& dO, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& o, const Tensor& lse,
                              const MaskView& mask, bool causal, float scale, Tensor& dq,
                              Tensor& dk, Tensor& dv) {
  const int64_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], D = q.shape()[3];
  Tensor dvec = Tensor::empty({BH * Tq}, DType::Float32, q.device());
  cudaStream_t stream = stream_of(q);
  dispatch(q.dtype(), D, [&]<class T, int Dt>() {
    dvec_kernel<T><<<static_cast<unsigned>((BH * Tq + kWarps - 1) / kWarps), kBlockThreads, 0,
                     stream>>>(static_cast<const T*>(dO.data_ptr()),
                               static_cast<const T*>(o.data_ptr()),
                               static_cast<float*>(dvec.data_ptr()), BH * Tq, Dt);
    TS_CUDA_LAUNCH_CHECK("flash attention backward");
    Args a{};
    a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.o = o.data_ptr();
    a.dO = dO.data_ptr(), a.dq = dq.data_ptr(), a.dk = dk.data_ptr(), a.dv = dv.data_ptr();
    a.lse_in = static_cast<const float*>(lse.data_ptr());
    a.dvec = static_cast<const float*>(dvec.data_ptr());
    a.mask = mask, a.causal = causal, a.Tq = Tq, a.Tk = k.shape()[2], a.scale = scale;
    backward<T, Dt>(a, BH, stream);
  });
}

}  // namespace tessera::cuda
