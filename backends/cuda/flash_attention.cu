// Flash-style attention (Dao et al., FlashAttention-2) on tensor cores. A block is 4 warps;
// each warp owns 16 rows of a 64-row tile. Forward (mma.sync, registers only): per query
// tile, loop over key tiles keeping a running max and sum per row. Backward, deterministic
// without atomics: one kernel per key tile accumulates dK and dV over query tiles; a second
// per query tile accumulates dQ over key tiles (scores rebuilt from the saved log-sum-exp in
// both). Scores, P and dS stay in registers throughout. P and dS are rounded to the input type
// before their products, as in FlashAttention; every sum is in float32.
#include <cstdlib>

#include "backends/cuda/flash_attention.h"
#include "backends/cuda/kernel_util.cuh"

namespace tessera::cuda {
namespace {

constexpr int kTile = 64;  // rows of a query tile and keys of a key tile
constexpr int kWarps = 4;
constexpr int kBlockThreads = kWarps * 32;

// Shared-memory rows are padded by 8 elements (16 bytes), so the 8 rows an ldmatrix reads
// fall in different banks.
template <int D>
constexpr int ld_tile = D + 8;  // Q, K, V, dO tiles (16-bit)

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

// True when every (query, key) pair of the 64 x 64 tile pair is in range and visible: no
// mask tensor and the tile wholly below the causal diagonal. Such tiles (all but the
// diagonal ones of a causal pass) skip the per-score index and mask checks.
__device__ inline bool whole_tile_visible(const MaskView& mask, bool causal, int64_t q0, int64_t k0,
                                          int64_t Tq, int64_t Tk) {
  return !mask.ptr && q0 + kTile <= Tq && k0 + kTile <= Tk &&
         (!causal || k0 + kTile - 1 <= q0 + Tk - Tq);
}

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

// acc[16 x 64] = rows (16 rows of tile A from `a_rows`) times the rows of tile B transposed:
// the score-like products S = Q K^T, dP = dO V^T, S^T = K Q^T, dP^T = V dO^T.
template <class T, int D>
__device__ void mm_rows_bt(float (&acc)[kTile / 8][4], const T* a_rows, const T* b_tile) {
  constexpr int ld = ld_tile<D>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int nt = 0; nt < kTile / 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; kk += 2) {
    uint32_t a0[4], a1[4];
    const T* a_at = a_rows + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
    ldmatrix_x4(a0, a_at + kk * 16);
    ldmatrix_x4(a1, a_at + (kk + 1) * 16);
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt) {
      uint32_t b[4];  // rows nt*8.. of B at columns kk*16, +8, +16, +24
      ldmatrix_x4(b, b_tile + (nt * 8 + (lane & 7)) * ld + kk * 16 + (lane >> 3) * 8);
      mma16816<T>(acc[nt], a0, b[0], b[1]);
      mma16816<T>(acc[nt], a1, b[2], b[3]);
    }
  }
}

// out[D/8][4] += P (16 x 64, in score registers) times tile B (64 x D, rows = the 64 columns
// of P): dV += P^T dO, dK += dS^T Q, dQ += dS K.
template <class T, int D>
__device__ void mm_acc_regs(float (&out)[D / 8][4], const float (&p)[kTile / 8][4],
                            const T* b_tile) {
  constexpr int ld = ld_tile<D>;
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kc = 0; kc < kTile / 16; ++kc) {
    const uint32_t pa[4] = {
        pack2<T>(p[2 * kc][0], p[2 * kc][1]), pack2<T>(p[2 * kc][2], p[2 * kc][3]),
        pack2<T>(p[2 * kc + 1][0], p[2 * kc + 1][1]), pack2<T>(p[2 * kc + 1][2], p[2 * kc + 1][3])};
#pragma unroll
    for (int dt = 0; dt < D / 8; dt += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(
          b, b_tile + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + (dt + (lane >> 4)) * 8);
      mma16816<T>(out[dt], pa, b[0], b[1]);
      mma16816<T>(out[dt + 1], pa, b[2], b[3]);
    }
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
    mm_rows_bt<T, D>(sc, Qs + warp * 16 * ld, Ks);
    // scale, mask, running max and sum per row (rows g and g + 8 of this warp)
    float mx[2] = {-INFINITY, -INFINITY};
    if (whole_tile_visible(a.mask, a.causal, q0, k0, Tq, Tk)) {
#pragma unroll
      for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sc[nt][e] *= a.scale;
          mx[e >> 1] = fmaxf(mx[e >> 1], sc[nt][e]);
        }
    } else {
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
    mm_acc_regs<T, D>(o, sc, Vs);  // O += P V, P taken straight from the score registers
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
  for (int64_t c = lane; c < D; c += 32)
    s += float(load(dO[row * D + c])) * float(load(O[row * D + c]));
  s = warp_reduce(s, SumOp{});
  if (lane == 0) dvec[row] = s;
}

// P and dS of one score: P = exp(scale S - lse) where visible, dS = P (dP - dvec) scale.
__device__ inline void grad_entry(float sc, float dp, float lse, float dv, bool vis, float scale,
                                  float& p, float& ds) {
  p = (vis && isfinite(lse)) ? __expf(sc * scale - lse) : 0.0f;
  ds = p * (dp - dv) * scale;
}

// Writes accumulator rows r0 + g and r0 + g + 8 (below `rows`) of a [rows, D] matrix.
template <class T, int D>
__device__ void store_acc(T* dst, int64_t r0, int64_t rows, const float (&acc)[D / 8][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t r = r0 + g + 8 * hr;
    if (r >= rows) continue;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(dst + r * D + dt * 8 + 2 * t) =
          pack2<T>(acc[dt][2 * hr], acc[dt][2 * hr + 1]);
  }
}

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
  static const bool ready = (allow_smem(flash_bwd_dkdv_kernel<T, D>, bytes),
                             allow_smem(flash_bwd_dq_kernel<T, D>, bytes), true);
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
  dispatch(q.dtype(), q.shape()[3], [&]<class T, int D>() { forward<T, D>(a, BH, stream_of(q)); });
}

void flash_attention_backward(const Tensor& dO, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& o, const Tensor& lse, const MaskView& mask, bool causal,
                              float scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  const int64_t BH = q.shape()[0] * q.shape()[1], Tq = q.shape()[2], D = q.shape()[3];
  Tensor dvec = Tensor::empty({BH * Tq}, DType::Float32, q.device());
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
