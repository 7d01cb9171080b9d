// layer_norm's fast path: one warp per row with the row in registers, moved in 16-byte packs
// (lane l takes packs l, l + 32, ...), so each warp instruction moves 512 contiguous bytes.
// Taken when C is a whole number of packs and every pointer is 16-byte aligned; kPacks, the
// packs per lane, is a template argument so the row stays in registers. The generic kernels
// in layer_norm.cu (scalar loads, row cached in shared memory) cover everything else.
// Backward keeps its dweight/dbias sums in registers over a warp's rows and writes its
// partial row once, where the generic kernel adds into it in memory row by row.
#pragma once
#include "elementwise.cuh"

namespace tessera::cuda {

constexpr int kVecWarpsPerBlock = 8;
// Backward holds four arrays per lane (~160 registers at C = 768): small blocks let three
// of them share an SM.
constexpr int kVecBackwardWarps = 4;

template <class T>
constexpr int pack_elems() {
  return static_cast<int>(16 / sizeof(T));
}

template <class T, int kPacks>
__global__ void layer_norm_vec_kernel(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean,
                                      compute_t<T>* rstd, int64_t N, int64_t C, compute_t<T> eps) {
  using A = compute_t<T>;
  constexpr int E = pack_elems<T>();
  using P = Pack<T, E>;
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kVecWarpsPerBlock} + threadIdx.x / 32;
  if (row >= N) return;
  const int64_t packs = C / E;
  const P* xr = reinterpret_cast<const P*>(x + row * C);
  A v[kPacks][E];
  A s = 0;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t p = lane + 32 * k;
    const P in = p < packs ? xr[p] : P{};
#pragma unroll
    for (int e = 0; e < E; ++e) {
      v[k][e] = p < packs ? A(load(in.v[e])) : A(0);
      s += v[k][e];
    }
  }
  const A m = warp_reduce(s, SumOp{}) / A(C);
  A q = 0;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    if (lane + 32 * k >= packs) continue;
#pragma unroll
    for (int e = 0; e < E; ++e) q += (v[k][e] - m) * (v[k][e] - m);
  }
  const A rs = A(1) / sqrt(warp_reduce(q, SumOp{}) / A(C) + eps);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
  P* yr = reinterpret_cast<P*>(y + row * C);
  const P* wp = reinterpret_cast<const P*>(w);
  const P* bp = reinterpret_cast<const P*>(b);
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t p = lane + 32 * k;
    if (p >= packs) continue;
    const P wv = w ? wp[p] : P{}, bv = b ? bp[p] : P{};
    P out;
#pragma unroll
    for (int e = 0; e < E; ++e) {
      A o = (v[k][e] - m) * rs;
      if (w) o *= A(load(wv.v[e]));
      if (b) o += A(load(bv.v[e]));
      out.v[e] = convert<T>(o);
    }
    yr[p] = out;
  }
}

// rows_per_warp consecutive rows per warp; partial dweight/dbias row gw of [warps, C].
template <class T, int kPacks>
__global__ void layer_norm_backward_vec_kernel(const T* dy, const T* x, const compute_t<T>* mean,
                                               const compute_t<T>* rstd, const T* w, T* dx,
                                               compute_t<T>* part_dw, compute_t<T>* part_db,
                                               int64_t N, int64_t C, int64_t rows_per_warp) {
  using A = compute_t<T>;
  constexpr int E = pack_elems<T>();
  using P = Pack<T, E>;
  using AP = Pack<A, E>;
  const int lane = threadIdx.x % 32;
  const int64_t gw = blockIdx.x * int64_t{kVecBackwardWarps} + threadIdx.x / 32;
  const int64_t r0 = gw * rows_per_warp;
  if (r0 >= N) return;
  const int64_t r1 = min(N, r0 + rows_per_warp), packs = C / E;
  const P* wp = reinterpret_cast<const P*>(w);
  A dw[kPacks][E] = {}, db[kPacks][E] = {};
  for (int64_t r = r0; r < r1; ++r) {
    const P* xr = reinterpret_cast<const P*>(x + r * C);
    const P* dyr = reinterpret_cast<const P*>(dy + r * C);
    const A m = mean[r], rs = rstd[r];
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w
    A xhat[kPacks][E], g[kPacks][E];
    A sg = 0, sgx = 0;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64_t p = lane + 32 * k;
      const bool in = p < packs;
      const P xv = in ? xr[p] : P{}, dv = in ? dyr[p] : P{};
      const P wv = in && w ? wp[p] : P{};
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const A d = in ? A(load(dv.v[e])) : A(0);
        xhat[k][e] = in ? (A(load(xv.v[e])) - m) * rs : A(0);
        g[k][e] = w ? d * A(load(wv.v[e])) : d;
        sg += g[k][e];
        sgx += g[k][e] * xhat[k][e];
        dw[k][e] += d * xhat[k][e];
        db[k][e] += d;
      }
    }
    sg = warp_reduce(sg, SumOp{}) / A(C);
    sgx = warp_reduce(sgx, SumOp{}) / A(C);
    P* dxr = reinterpret_cast<P*>(dx + r * C);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64_t p = lane + 32 * k;
      if (p >= packs) continue;
      P out;
#pragma unroll
      for (int e = 0; e < E; ++e) out.v[e] = convert<T>(rs * (g[k][e] - sg - xhat[k][e] * sgx));
      dxr[p] = out;
    }
  }
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t p = lane + 32 * k;
    if (p >= packs) continue;
    AP pw, pb;
#pragma unroll
    for (int e = 0; e < E; ++e) pw.v[e] = dw[k][e], pb.v[e] = db[k][e];
    if (part_dw) reinterpret_cast<AP*>(part_dw + gw * C)[p] = pw;
    if (part_db) reinterpret_cast<AP*>(part_db + gw * C)[p] = pb;
  }
}

// Packs per lane for a row of C elements of T, rounded up to an instantiated count; 0 when
// the row does not fit (forward: 64 values per lane; backward, which holds four arrays: 32).
template <class T>
int vec_packs_per_lane(int64_t C, bool backward) {
  const int64_t packs = (C / pack_elems<T>() + 31) / 32;
  const int64_t max_values = backward ? 32 : 64;
  for (int k : {1, 2, 3, 4, 6, 8})
    if (k >= packs) return k * pack_elems<T>() <= max_values ? k : 0;
  return 0;
}

// Calls f(std::integral_constant<int, k>) for k from vec_packs_per_lane; counts above kMax
// (rows that do not fit this kernel's registers) are not instantiated.
template <int kMax, class F>
void with_packs(int k, F&& f) {
  auto call = [&]<int K>() {
    if constexpr (K <= kMax) f(std::integral_constant<int, K>{});
  };
  switch (k) {
    case 1:
      return call.template operator()<1>();
    case 2:
      return call.template operator()<2>();
    case 3:
      return call.template operator()<3>();
    case 4:
      return call.template operator()<4>();
    case 6:
      return call.template operator()<6>();
    default:
      return call.template operator()<8>();
  }
}

}  // namespace tessera::cuda
