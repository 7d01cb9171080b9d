// Flash-style attention (Dao et al., FlashAttention-2) on tensor cores. A block is 4 warps;
// each warp owns 16 rows of a 64-row tile. Forward (mma.sync, registers only): per query
// tile, loop over key tiles keeping a running max and sum per row. Backward (WMMA fragments
// through shared memory), deterministic without atomics: one kernel per key tile accumulates
// dK and dV over query tiles; a second per query tile accumulates dQ over key tiles (scores
// rebuilt from the saved log-sum-exp in both). P and dS are rounded to the input type before their
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

// Shared-memory rows are padded (8 halves, 4 floats) so that the fragment loads and the
// column-per-lane loops below do not hit one bank from many lanes.
template <int D>
constexpr int ld_tile = D + 8;            // Q, K, V, dO tiles (16-bit)
constexpr int kLdScore = kTile + 4;       // S, dP (float)
constexpr int kLdProb = kTile + 8;        // P, dS (16-bit)
template <int D>
constexpr int ld_acc = D + 4;             // O and the output staging (float)

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

// Loads rows [r0, r0 + 64) of a contiguous [rows, D] matrix into a padded shared tile in
// 16-byte words, zeros past `rows`.
template <class T, int D>
__device__ void load_tile(T* dst, const T* src, int64_t r0, int64_t rows) {
  constexpr int kWords = D * sizeof(T) / 16;
  for (int idx = threadIdx.x; idx < kTile * kWords; idx += kBlockThreads) {
    const int r = idx / kWords, w = idx % kWords;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r0 + r < rows) val = reinterpret_cast<const uint4*>(src + (r0 + r) * D)[w];
    reinterpret_cast<uint4*>(dst + r * ld_tile<D>)[w] = val;
  }
}

// C[16 x 64] (float, ld kLdScore) = A[16 x D] * B^T, A and B [64 x D] padded tiles.
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
      wmma::load_matrix_sync(a, A + kk * 16, ld_tile<D>);
      wmma::load_matrix_sync(b, B + n * 16 * ld_tile<D> + kk * 16, ld_tile<D>);
      wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + n * 16, acc, kLdScore, wmma::mem_row_major);
  }
}

// acc[n] += P[16 x 64] (ld kLdProb) * V[64 x D] (padded tile), for D/16 column blocks.
template <class T, int D>
__device__ void mm_acc(FragC (&acc)[D / 16], const T* P, const T* V) {
#pragma unroll
  for (int n = 0; n < D / 16; ++n) {
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      FragA<T> a;
      FragBRow<T> b;
      wmma::load_matrix_sync(a, P + kk * 16, kLdProb);
      wmma::load_matrix_sync(b, V + kk * 16 * ld_tile<D> + n * 16, ld_tile<D>);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
}

// Writes a warp's 16 accumulated rows (from r0) through a float staging area.
template <class T, int D>
__device__ void store_rows(T* dst, int64_t r0, int64_t rows, FragC (&acc)[D / 16], float* stage,
                           float factor = 1.0f) {
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(stage + n * 16, acc[n], ld_acc<D>, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int r = 0; r < 16; ++r)
    if (r0 + r < rows)
      for (int c = lane; c < D; c += 32)
        dst[(r0 + r) * D + c] = convert<T>(stage[r * ld_acc<D> + c] * factor);
}

// ---- forward: FlashAttention-2 in registers with mma.sync m16n8k16 ----
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"): with g = lane / 4 and
// t = lane % 4, an accumulator holds rows g and g + 8, columns 2t and 2t + 1 of a 16x8 tile;
// two adjacent accumulator tiles of P are exactly the A operand of the next product, so S
// and P never leave registers, and a row's max and sum need two shuffles within its quad.

__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
template <class T>
__device__ inline void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}
template <class T>
__device__ inline uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

template <class T, int D>
struct FwdSmem {
  static constexpr size_t tile = size_t{kTile} * ld_tile<D> * sizeof(T);
  static constexpr size_t bytes = 3 * tile;  // Q, K, V
};

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) flash_fwd_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>;
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + kTile * ld;
  T* Vs = Ks + kTile * ld;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, q0 = int64_t{blockIdx.x} * kTile, Tq = a.Tq, Tk = a.Tk;
  const T* Q = static_cast<const T*>(a.q) + bh * Tq * D;
  const T* K = static_cast<const T*>(a.k) + bh * Tk * D;
  const T* V = static_cast<const T*>(a.v) + bh * Tk * D;
  load_tile<T, D>(Qs, Q, q0, Tq);
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(qf[kk], Qs + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + kk * 16 +
                            (lane >> 4) * 8);
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int64_t i_row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  int64_t kend = Tk;
  if (a.causal) kend = max(int64_t{0}, min(Tk, q0 + kTile + Tk - Tq));
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Ks, K, k0, Tk);
    load_tile<T, D>(Vs, V, k0, Tk);
    __syncthreads();
    float sc[kTile / 8][4];
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
      sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; kk += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, Ks + (nt * 8 + (lane & 7)) * ld + kk * 16 + (lane >> 3) * 8);
        mma16816<T>(sc[nt], qf[kk], b[0], b[1]);
        mma16816<T>(sc[nt], qf[kk + 1], b[2], b[3]);
      }
    }
    // scale, mask, running max and sum per row (rows g and g + 8 of this warp)
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1;
        const int64_t j = k0 + nt * 8 + 2 * t + (e & 1);
        float v = sc[nt][e] * a.scale;
        if (i_row[hr] >= Tq || j >= Tk || !visible(a.mask, a.causal, bh, i_row[hr], j, Tq, Tk))
          v = -INFINITY;
        sc[nt][e] = v;
        mx[hr] = fmaxf(mx[hr], v);
      }
    float alpha[2], m_new[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
      mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
      m_new[hr] = fmaxf(m[hr], mx[hr]);
      alpha[hr] = m_new[hr] == -INFINITY ? 1.0f : __expf(m[hr] - m_new[hr]);
    }
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1;
        const float p = m_new[hr] == -INFINITY ? 0.0f : __expf(sc[nt][e] - m_new[hr]);
        sc[nt][e] = p;
        sum[hr] += p;
      }
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      sum[hr] += __shfl_xor_sync(0xffffffffu, sum[hr], 1);
      sum[hr] += __shfl_xor_sync(0xffffffffu, sum[hr], 2);
      l[hr] = l[hr] * alpha[hr] + sum[hr];
      m[hr] = m_new[hr];
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }
    // O += P V, P taken straight from the score registers
#pragma unroll
    for (int kc = 0; kc < kTile / 16; ++kc) {
      const uint32_t pa[4] = {pack2<T>(sc[2 * kc][0], sc[2 * kc][1]),
                              pack2<T>(sc[2 * kc][2], sc[2 * kc][3]),
                              pack2<T>(sc[2 * kc + 1][0], sc[2 * kc + 1][1]),
                              pack2<T>(sc[2 * kc + 1][2], sc[2 * kc + 1][3])};
#pragma unroll
      for (int dt = 0; dt < D / 8; dt += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, Vs + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld +
                                 (dt + (lane >> 4)) * 8);
        mma16816<T>(o[dt], pa, b[0], b[1]);
        mma16816<T>(o[dt + 1], pa, b[2], b[3]);
      }
    }
  }
  T* O = static_cast<T*>(a.out) + bh * Tq * D;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t i = i_row[hr];
    if (i >= Tq) continue;
    const float inv = l[hr] > 0.0f ? 1.0f / l[hr] : 0.0f;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(O + i * D + dt * 8 + 2 * t) =
          pack2<T>(o[dt][2 * hr] * inv, o[dt][2 * hr + 1] * inv);
    if (t == 0) a.lse[bh * Tq + i] = l[hr] > 0.0f ? m[hr] + logf(l[hr]) : -INFINITY;
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

// P and dS of one score: P = exp(scale S - lse) where visible, dS = P (dP - dvec) scale.
__device__ inline void grad_entry(float sc, float dp, float lse, float dv, bool vis, float scale,
                                  float& p, float& ds) {
  p = (vis && isfinite(lse)) ? __expf(sc * scale - lse) : 0.0f;
  ds = p * (dp - dv) * scale;
}

// Backward shared memory: four tiles, per warp S and dP (float) and P and dS (T), and the
// log-sum-exp and dvec of the 64 query rows in play.
template <class T, int D>
struct BwdSmem {
  static constexpr size_t tile = size_t{kTile} * ld_tile<D> * sizeof(T);
  static constexpr size_t f = 4 * tile;
  static constexpr size_t per_warp_f = 2 * 16 * kLdScore;  // floats
  static constexpr size_t t = f + size_t{kWarps} * per_warp_f * sizeof(float);
  static constexpr size_t per_warp_t = 2 * 16 * kLdProb;  // T elements
  static constexpr size_t stats = t + size_t{kWarps} * per_warp_t * sizeof(T);
  static constexpr size_t bytes = stats + 2 * kTile * sizeof(float);
  static_assert(per_warp_f >= 16 * (D + 4), "staging must fit in a warp's float area");
};

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) flash_bwd_dkdv_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  using L = BwdSmem<T, D>;
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kTile * ld_tile<D>;
  T* Qs = Vs + kTile * ld_tile<D>;
  T* dOs = Qs + kTile * ld_tile<D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* Sw = reinterpret_cast<float*>(smem + L::f) + warp * L::per_warp_f;  // S^T
  float* dPw = Sw + 16 * kLdScore;                                            // dP^T
  T* Pw = reinterpret_cast<T*>(smem + L::t) + warp * L::per_warp_t;
  T* dSw = Pw + 16 * kLdProb;
  float* lse_s = reinterpret_cast<float*>(smem + L::stats);
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
  const int64_t key0 = k0 + warp * 16;
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
    mm_abt<T, D>(Sw, Ks + warp * 16 * ld_tile<D>, Qs);    // S^T: rows are keys
    mm_abt<T, D>(dPw, Vs + warp * 16 * ld_tile<D>, dOs);  // dP^T
    __syncwarp();
    // Each lane owns query columns lane and lane + 32.
    for (int r = 0; r < 16; ++r) {
      const int64_t j = key0 + r;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int q = lane + 32 * h;
        const int64_t i = q0 + q;
        const bool vis = i < Tq && j < Tk && visible(a.mask, a.causal, bh, i, j, Tq, Tk);
        float p, ds;
        grad_entry(Sw[r * kLdScore + q], dPw[r * kLdScore + q], lse_s[q], dvec_s[q], vis,
                   a.scale, p, ds);
        Pw[r * kLdProb + q] = convert<T>(p);
        dSw[r * kLdProb + q] = convert<T>(ds);
      }
    }
    __syncwarp();
    mm_acc<T, D>(dv, Pw, dOs);  // dV += P^T dO
    mm_acc<T, D>(dk, dSw, Qs);  // dK += dS^T Q
  }
  __syncwarp();
  store_rows<T, D>(static_cast<T*>(a.dk) + bh * Tk * D, key0, Tk, dk, Sw);
  __syncwarp();
  store_rows<T, D>(static_cast<T*>(a.dv) + bh * Tk * D, key0, Tk, dv, Sw);
}

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) flash_bwd_dq_kernel(Args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  using L = BwdSmem<T, D>;
  T* Qs = reinterpret_cast<T*>(smem);
  T* dOs = Qs + kTile * ld_tile<D>;
  T* Ks = dOs + kTile * ld_tile<D>;
  T* Vs = Ks + kTile * ld_tile<D>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* Sw = reinterpret_cast<float*>(smem + L::f) + warp * L::per_warp_f;
  float* dPw = Sw + 16 * kLdScore;
  T* dSw = reinterpret_cast<T*>(smem + L::t) + warp * L::per_warp_t;
  float* lse_s = reinterpret_cast<float*>(smem + L::stats);
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
  const int64_t row0 = q0 + warp * 16;
  for (int64_t k0 = 0; k0 < kend; k0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Ks, K, k0, Tk);
    load_tile<T, D>(Vs, V, k0, Tk);
    __syncthreads();
    mm_abt<T, D>(Sw, Qs + warp * 16 * ld_tile<D>, Ks);
    mm_abt<T, D>(dPw, dOs + warp * 16 * ld_tile<D>, Vs);
    __syncwarp();
    // Each lane owns key columns lane and lane + 32.
    for (int r = 0; r < 16; ++r) {
      const int64_t i = row0 + r;
      const float l = lse_s[warp * 16 + r], dvv = dvec_s[warp * 16 + r];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int kc = lane + 32 * h;
        const int64_t j = k0 + kc;
        const bool vis = i < Tq && j < Tk && visible(a.mask, a.causal, bh, i, j, Tq, Tk);
        float p, ds;
        grad_entry(Sw[r * kLdScore + kc], dPw[r * kLdScore + kc], l, dvv, vis, a.scale, p, ds);
        dSw[r * kLdProb + kc] = convert<T>(ds);
      }
    }
    __syncwarp();
    mm_acc<T, D>(dq, dSw, Ks);  // dQ += dS K
  }
  __syncwarp();
  store_rows<T, D>(static_cast<T*>(a.dq) + bh * Tq * D, row0, Tq, dq, Sw);
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
