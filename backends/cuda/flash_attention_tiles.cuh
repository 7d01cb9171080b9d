// Shared pieces of the flash attention kernels (flash_attention_forward.cu and
// flash_attention_backward.cu): tile sizes, the kernel arguments, shared-memory tile loads, the
// mma.sync fragment helpers and the two tile products both passes are built from.
#pragma once
#include "flash_attention.h"
#include "kernel_util.cuh"

namespace tessera::cuda::flash {

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

// ---- tensor-core products with mma.sync m16n8k16 ----
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

// ---- pieces of both forward passes (dense and block-sparse) ----

// One key tile's step of the online softmax for a warp's 16 query rows (rows g and g + 8 of
// each thread's quad): `sc` holds the scaled scores (-inf where hidden) and becomes P; `mx` is
// this thread's max of them; the running max `m` and sum `l` advance and `o` is rescaled.
template <int D>
__device__ __forceinline__ void online_softmax_step(float (&sc)[kTile / 8][4], float (&mx)[2],
                                                    float (&m)[2], float (&l)[2],
                                                    float (&o)[D / 8][4]) {
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
}

// The forward's last step: rows i_row (below `rows`) of O = o / l in T, and their
// log-sum-exp (-inf for a row that saw nothing). O and lse point at this head's first row.
template <class T, int D>
__device__ __forceinline__ void store_rows(T* O, float* lse, const int64_t (&i_row)[2],
                                           int64_t rows, const float (&o)[D / 8][4],
                                           const float (&m)[2], const float (&l)[2]) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t i = i_row[hr];
    if (i >= rows) continue;
    const float inv = l[hr] > 0.0f ? 1.0f / l[hr] : 0.0f;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<uint32_t*>(O + i * D + dt * 8 + 2 * t) =
          pack2<T>(o[dt][2 * hr] * inv, o[dt][2 * hr + 1] * inv);
    if (t == 0) lse[i] = l[hr] > 0.0f ? m[hr] + logf(l[hr]) : -INFINITY;
  }
}

// ---- pieces of both backward passes (dense and block-sparse) ----

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

template <class Kernel>
void allow_smem(Kernel k, size_t bytes) {
  TS_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(bytes)));
}

// Calls f.template operator()<T, D>() for the supported (dtype, head size) pairs.
template <class F>
void dispatch(DType dt, int64_t D, F&& f) {
  if (dt == DType::BFloat16) {
    if (D == 64) return f.template operator()<BFloat16, 64>();
    return f.template operator()<BFloat16, 128>();
  }
  if (D == 64) return f.template operator()<Half, 64>();
  return f.template operator()<Half, 128>();
}

}  // namespace tessera::cuda::flash
