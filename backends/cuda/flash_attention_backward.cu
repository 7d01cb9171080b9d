// Flash-style attention backward, deterministic without atomics: one kernel per key tile
// accumulates dK and dV over query tiles; a second per query tile accumulates dQ over key
// tiles (scores rebuilt from the saved log-sum-exp in both). Scores, P and dS stay in
// registers throughout. P and dS are rounded to the input type before their products, as in
// FlashAttention; every sum is in float32. Shared pieces: flash_attention_tiles.cuh.
#include "flash_attention_tiles.cuh"

namespace tessera::cuda {
namespace {

using namespace flash;

// Backward shared memory: four [64 x D] tiles and the log-sum-exp and dvec of 64 query rows.
template <class T, int D>
struct BwdSmem {
  static constexpr size_t tile = size_t{kTile} * ld_tile<D> * sizeof(T);
  static constexpr size_t stats = 4 * tile;
  static constexpr size_t bytes = stats + 2 * kTile * sizeof(float);
};

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) flash_bwd_dkdv_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>;
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kTile * ld;
  T* Qs = Vs + kTile * ld;
  T* dOs = Qs + kTile * ld;
  float* lse_s = reinterpret_cast<float*>(smem + BwdSmem<T, D>::stats);
  float* dvec_s = lse_s + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, k0 = int64_t{blockIdx.x} * kTile, Tq = a.Tq, Tk = a.Tk;
  const T* Q = static_cast<const T*>(a.q) + bh * Tq * D;
  const T* K = static_cast<const T*>(a.k) + bh * Tk * D;
  const T* V = static_cast<const T*>(a.v) + bh * Tk * D;
  const T* dO = static_cast<const T*>(a.dO) + bh * Tq * D;
  load_tile<T, D>(Ks, K, k0, Tk);
  load_tile<T, D>(Vs, V, k0, Tk);
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.0f;
  int64_t qstart = 0;
  if (a.causal) qstart = max(int64_t{0}, k0 - (Tk - Tq)) / kTile * kTile;
  const int64_t key0 = k0 + warp * 16;
  for (int64_t q0 = qstart; q0 < Tq; q0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Qs, Q, q0, Tq);
    load_tile<T, D>(dOs, dO, q0, Tq);
    for (int i = threadIdx.x; i < kTile; i += kBlockThreads) {
      const bool in = q0 + i < Tq;
      lse_s[i] = in ? a.lse_in[bh * Tq + q0 + i] : INFINITY;
      dvec_s[i] = in ? a.dvec[bh * Tq + q0 + i] : 0.0f;
    }
    __syncthreads();
    float st[kTile / 8][4], dpt[kTile / 8][4];  // S^T and dP^T: rows keys, columns queries
    mm_rows_bt<T, D>(st, Ks + warp * 16 * ld, Qs);
    mm_rows_bt<T, D>(dpt, Vs + warp * 16 * ld, dOs);
    if (whole_tile_visible(a.mask, a.causal, q0, k0, Tq, Tk)) {
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qc = nt * 8 + 2 * t + (e & 1);
          grad_entry(st[nt][e], dpt[nt][e], lse_s[qc], dvec_s[qc], true, a.scale, st[nt][e],
                     dpt[nt][e]);
        }
    } else {
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = key0 + g + 8 * (e >> 1);
          const int qc = nt * 8 + 2 * t + (e & 1);
          const int64_t i = q0 + qc;
          const bool vis = i < Tq && j < Tk && visible(a.mask, a.causal, bh, i, j, Tq, Tk);
          grad_entry(st[nt][e], dpt[nt][e], lse_s[qc], dvec_s[qc], vis, a.scale, st[nt][e],
                     dpt[nt][e]);
        }
    }
    mm_acc_regs<T, D>(dv, st, dOs);  // dV += P^T dO
    mm_acc_regs<T, D>(dk, dpt, Qs);  // dK += dS^T Q
  }
  store_acc<T, D>(static_cast<T*>(a.dk) + bh * Tk * D, key0, Tk, dk);
  store_acc<T, D>(static_cast<T*>(a.dv) + bh * Tk * D, key0, Tk, dv);
}

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) flash_bwd_dq_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>;
  T* Qs = reinterpret_cast<T*>(smem);
  T* dOs = Qs + kTile * ld;
  T* Ks = dOs + kTile * ld;
  T* Vs = Ks + kTile * ld;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, q0 = int64_t{blockIdx.x} * kTile, Tq = a.Tq, Tk = a.Tk;
  const T* Q = static_cast<const T*>(a.q) + bh * Tq * D;
  const T* K = static_cast<const T*>(a.k) + bh * Tk * D;
  const T* V = static_cast<const T*>(a.v) + bh * Tk * D;
  const T* dO = static_cast<const T*>(a.dO) + bh * Tq * D;
  load_tile<T, D>(Qs, Q, q0, Tq);
  load_tile<T, D>(dOs, dO, q0, Tq);
  const int64_t row0 = q0 + warp * 16;
  float lse[2], dvv[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t i = row0 + g + 8 * hr;
    lse[hr] = i < Tq ? a.lse_in[bh * Tq + i] : INFINITY;
    dvv[hr] = i < Tq ? a.dvec[bh * Tq + i] : 0.0f;
  }
  float dq[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;
  int64_t kend = Tk;
  if (a.causal) kend = max(int64_t{0}, min(Tk, q0 + kTile + Tk - Tq));
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Ks, K, k0, Tk);
    load_tile<T, D>(Vs, V, k0, Tk);
    __syncthreads();
    float sc[kTile / 8][4], dp[kTile / 8][4];
    mm_rows_bt<T, D>(sc, Qs + warp * 16 * ld, Ks);
    mm_rows_bt<T, D>(dp, dOs + warp * 16 * ld, Vs);
    const bool whole = whole_tile_visible(a.mask, a.causal, q0, k0, Tq, Tk);
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1;
        bool vis = true;
        if (!whole) {
          const int64_t i = row0 + g + 8 * hr, j = k0 + nt * 8 + 2 * t + (e & 1);
          vis = i < Tq && j < Tk && visible(a.mask, a.causal, bh, i, j, Tq, Tk);
        }
        float p;
        grad_entry(sc[nt][e], dp[nt][e], lse[hr], dvv[hr], vis, a.scale, p, sc[nt][e]);
      }
    mm_acc_regs<T, D>(dq, sc, Ks);  // dQ += dS K
  }
  store_acc<T, D>(static_cast<T*>(a.dq) + bh * Tq * D, row0, Tq, dq);
}

template <class T, int D>
void backward(const Args& a, int64_t BH, cudaStream_t stream) {
  constexpr size_t bytes = BwdSmem<T, D>::bytes;
  static const bool ready = (allow_smem(flash_bwd_dkdv_kernel<T, D>, bytes),
                             allow_smem(flash_bwd_dq_kernel<T, D>, bytes), true);
  (void)ready;
  const dim3 gk(static_cast<unsigned>((a.Tk + kTile - 1) / kTile), static_cast<unsigned>(BH));
  flash_bwd_dkdv_kernel<T, D><<<gk, kBlockThreads, bytes, stream>>>(a);
  const dim3 gq(static_cast<unsigned>((a.Tq + kTile - 1) / kTile), static_cast<unsigned>(BH));
  flash_bwd_dq_kernel<T, D><<<gq, kBlockThreads, bytes, stream>>>(a);
  TS_CUDA_LAUNCH_CHECK("flash attention backward");
}

}  // namespace

void flash_attention_backward(const TensorBase& dO, const TensorBase& q, const TensorBase& k,
                              const TensorBase& v, const TensorBase& o, const TensorBase& lse,
                              const MaskView& mask, bool causal, float scale, TensorBase& dq,
                              TensorBase& dk, TensorBase& dv) {
  const int64_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], D = q.shape()[3];
  TensorBase dvec = TensorBase::empty({BH * Tq}, DType::Float32, q.device());
  cudaStream_t stream = stream_of(q);
  dispatch(q.dtype(), D, [&]<class T, int Dt>() {
    dvec_kernel<T>
        <<<static_cast<unsigned>((BH * Tq + kWarps - 1) / kWarps), kBlockThreads, 0, stream>>>(
            static_cast<const T*>(dO.data_ptr()), static_cast<const T*>(o.data_ptr()),
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
