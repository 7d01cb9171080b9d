// Block-sparse attention on tensor cores (float16/bfloat16, head size 64 or 128): the flash
// kernels' tiles (flash_attention_tiles.cuh) over the key chunks a query tile's layout rows
// name, instead of every key tile. Keys are gathered 16 at a time (a chunk), four chunks to a
// 64-key tile, from a per-(head, query tile) list the host builds from the layout; each score
// is then checked against the layout itself (and causal order and key padding), so the result
// is exactly the layout's attention at any block size. Backward as the flash backward: dK and
// dV per key tile over the query chunks that attend to it, then dQ per query tile: no atomics.
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "block_sparse_flash.h"
#include "flash_attention_tiles.cuh"

namespace tessera::cuda {
namespace {

using namespace flash;

constexpr int kChunk = 16;               // keys (or queries) gathered together
constexpr int kChunks = kTile / kChunk;  // chunks per 64-row tile

struct SparseArgs {
  Args base;
  const uint8_t* layout;   // [H, n, n]
  const int32_t* offsets;  // per (head, tile): its chunk list's start in `chunks`
  const int32_t* chunks;   // chunk indices; -1 pads a list to a multiple of kChunks
  const bool* key_mask;    // [B, T] or null
  int64_t H, n, bs;
};

// Whether query i may see key j (both in range).
__device__ inline bool sees(const SparseArgs& a, int64_t b, int64_t h, int64_t i, int64_t j) {
  return (!a.base.causal || j <= i) && (!a.key_mask || a.key_mask[b * a.base.Tq + j]) &&
         a.layout[(h * a.n + i / a.bs) * a.n + j / a.bs] != 0;
}

// Per (tile row, gathered chunk) of an iteration: 0 when the row sees none of the chunk's
// 16 positions, 1 when it sees all (the chunk inside one layout block, within causal order,
// no key padding to read), 2 when each score needs sees(). Rows are the tile's contiguous
// positions r0 + r; the chunks' positions are in `pos`. rows_are_queries: forward and dQ
// (rows queries, chunks keys); else dK/dV (rows keys, chunks queries).
__device__ void chunk_flags(const SparseArgs& a, int64_t b, int64_t h, int64_t r0, const int* pos,
                            bool rows_are_queries, uint8_t* flags) {
  const int64_t T = a.base.Tq;
  for (int idx = threadIdx.x; idx < kTile * kChunks; idx += kBlockThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    const int64_t row = r0 + r;
    const int first = pos[c * kChunk], last = pos[c * kChunk + kChunk - 1];
    uint8_t f = 2;
    if (row >= T || first < 0) {
      f = 0;
    } else if (last >= 0 && a.bs % kChunk == 0) {  // one block, every position in range
      const int bs = static_cast<int>(a.bs), n = static_cast<int>(a.n);
      const int ri = static_cast<int>(row);
      const int qb = (rows_are_queries ? ri : first) / bs,
                kb = (rows_are_queries ? first : ri) / bs;
      if (!a.layout[(static_cast<int>(h) * n + qb) * n + kb]) {
        f = 0;
      } else if (rows_are_queries) {  // keys first..last against query row
        f = a.base.causal && first > ri ? 0 : (!a.base.causal || last <= ri) && !a.key_mask ? 1 : 2;
      } else if (a.key_mask && !a.key_mask[b * T + row]) {  // a padded key: seen by none
        f = 0;
      } else {  // key row against queries first..last
        f = a.base.causal && ri > last ? 0 : (!a.base.causal || ri <= first) ? 1 : 2;
      }
    }
    flags[idx] = f;
  }
}

// Whether row `r` (local) sees column `col` of the gathered tile, from its chunk's flag.
__device__ inline bool visible_entry(const SparseArgs& a, const uint8_t* flags, int r, int col,
                                     int64_t b, int64_t h, int64_t i, int64_t j) {
  const uint8_t f = flags[r * kChunks + col / kChunk];
  return f == 1 ||
         (f == 2 && i >= 0 && j >= 0 && i < a.base.Tq && j < a.base.Tq && sees(a, b, h, i, j));
}

// Gathers rows of four chunks (chunk c: rows 16c .. 16c + 15) of a contiguous [T, D] matrix
// into a padded shared tile; `pos` gets each tile row's position (-1: none, zeros loaded).
template <class T, int D>
__device__ void gather_tile(T* dst, const T* src, const int32_t* chunk, int64_t rows, int* pos) {
  constexpr int kWords = D * sizeof(T) / 16;
  for (int idx = threadIdx.x; idx < kTile * kWords; idx += kBlockThreads) {
    const int r = idx / kWords, w = idx % kWords;
    const int32_t c = chunk[r / kChunk];
    const int64_t p = c < 0 ? -1 : int64_t{c} * kChunk + r % kChunk;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (p >= 0 && p < rows) val = reinterpret_cast<const uint4*>(src + p * D)[w];
    reinterpret_cast<uint4*>(dst + r * ld_tile<D>)[w] = val;
    if (pos && w == 0) pos[r] = p >= 0 && p < rows ? static_cast<int>(p) : -1;
  }
}

template <class T, int D>
struct SparseFwdSmem {
  static constexpr size_t tile = size_t{kTile} * ld_tile<D> * sizeof(T);
  static constexpr size_t bytes = 3 * tile + kTile * sizeof(int) + kTile * kChunks;
};

template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) sparse_flash_fwd_kernel(SparseArgs sa) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>;
  const Args& a = sa.base;
  T* Qs = reinterpret_cast<T*>(smem);
  T* Ks = Qs + kTile * ld;
  T* Vs = Ks + kTile * ld;
  int* kpos = reinterpret_cast<int*>(smem + 3 * SparseFwdSmem<T, D>::tile);
  uint8_t* flags = reinterpret_cast<uint8_t*>(kpos + kTile);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, b = bh / sa.H, h = bh % sa.H, T_ = a.Tq;
  const int64_t q0 = int64_t{blockIdx.x} * kTile;
  const T* Q = static_cast<const T*>(a.q) + bh * T_ * D;
  const T* K = static_cast<const T*>(a.k) + bh * T_ * D;
  const T* V = static_cast<const T*>(a.v) + bh * T_ * D;
  load_tile<T, D>(Qs, Q, q0, T_);
  float o[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int64_t i_row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const int64_t list = h * gridDim.x + blockIdx.x;
  for (int32_t e0 = sa.offsets[list]; e0 < sa.offsets[list + 1]; e0 += kChunks) {
    __syncthreads();
    gather_tile<T, D>(Ks, K, sa.chunks + e0, T_, kpos);
    gather_tile<T, D>(Vs, V, sa.chunks + e0, T_, nullptr);
    __syncthreads();
    chunk_flags(sa, b, h, q0, kpos, true, flags);
    __syncthreads();
    float sc[kTile / 8][4];
    mm_rows_bt<T, D>(sc, Qs + warp * 16 * ld, Ks);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1, col = nt * 8 + 2 * t + (e & 1);
        const bool vis =
            visible_entry(sa, flags, warp * 16 + g + 8 * hr, col, b, h, i_row[hr], kpos[col]);
        const float v = vis ? sc[nt][e] * a.scale : -INFINITY;
        sc[nt][e] = v;
        mx[hr] = fmaxf(mx[hr], v);
      }
    online_softmax_step<D>(sc, mx, m, l, o);
    mm_acc_regs<T, D>(o, sc, Vs);
  }
  store_rows<T, D>(static_cast<T*>(a.out) + bh * T_ * D, a.lse + bh * T_, i_row, T_, o, m, l);
}

template <class T, int D>
struct SparseBwdSmem {
  static constexpr size_t tile = size_t{kTile} * ld_tile<D> * sizeof(T);
  static constexpr size_t stats = 4 * tile;
  static constexpr size_t bytes =
      stats + 2 * kTile * sizeof(float) + kTile * sizeof(int) + kTile * kChunks;
};

// dK, dV of one 64-key tile over the query chunks whose layout rows reach it.
template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) sparse_flash_dkdv_kernel(SparseArgs sa) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>;
  const Args& a = sa.base;
  T* Ks = reinterpret_cast<T*>(smem);
  T* Vs = Ks + kTile * ld;
  T* Qs = Vs + kTile * ld;
  T* dOs = Qs + kTile * ld;
  float* lse_s = reinterpret_cast<float*>(smem + SparseBwdSmem<T, D>::stats);
  float* dvec_s = lse_s + kTile;
  int* qpos = reinterpret_cast<int*>(dvec_s + kTile);
  uint8_t* flags = reinterpret_cast<uint8_t*>(qpos + kTile);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, b = bh / sa.H, h = bh % sa.H, T_ = a.Tq;
  const int64_t k0 = int64_t{blockIdx.x} * kTile;
  const T* Q = static_cast<const T*>(a.q) + bh * T_ * D;
  const T* K = static_cast<const T*>(a.k) + bh * T_ * D;
  const T* V = static_cast<const T*>(a.v) + bh * T_ * D;
  const T* dO = static_cast<const T*>(a.dO) + bh * T_ * D;
  load_tile<T, D>(Ks, K, k0, T_);
  load_tile<T, D>(Vs, V, k0, T_);
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[dt][e] = dv[dt][e] = 0.0f;
  const int64_t key0 = k0 + warp * 16;
  const int64_t list = h * gridDim.x + blockIdx.x;
  for (int32_t e0 = sa.offsets[list]; e0 < sa.offsets[list + 1]; e0 += kChunks) {
    __syncthreads();
    gather_tile<T, D>(Qs, Q, sa.chunks + e0, T_, qpos);
    gather_tile<T, D>(dOs, dO, sa.chunks + e0, T_, nullptr);
    __syncthreads();
    for (int r = threadIdx.x; r < kTile; r += kBlockThreads) {
      const int i = qpos[r];
      lse_s[r] = i >= 0 ? a.lse_in[bh * T_ + i] : INFINITY;
      dvec_s[r] = i >= 0 ? a.dvec[bh * T_ + i] : 0.0f;
    }
    chunk_flags(sa, b, h, k0, qpos, false, flags);
    __syncthreads();
    float st[kTile / 8][4], dpt[kTile / 8][4];  // S^T and dP^T: rows keys, columns queries
    mm_rows_bt<T, D>(st, Ks + warp * 16 * ld, Qs);
    mm_rows_bt<T, D>(dpt, Vs + warp * 16 * ld, dOs);
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kr = warp * 16 + g + 8 * (e >> 1), qc = nt * 8 + 2 * t + (e & 1);
        const bool vis = visible_entry(sa, flags, kr, qc, b, h, qpos[qc], k0 + kr);
        grad_entry(st[nt][e], dpt[nt][e], lse_s[qc], dvec_s[qc], vis, a.scale, st[nt][e],
                   dpt[nt][e]);
      }
    mm_acc_regs<T, D>(dv, st, dOs);  // dV += P^T dO
    mm_acc_regs<T, D>(dk, dpt, Qs);  // dK += dS^T Q
  }
  store_acc<T, D>(static_cast<T*>(a.dk) + bh * T_ * D, key0, T_, dk);
  store_acc<T, D>(static_cast<T*>(a.dv) + bh * T_ * D, key0, T_, dv);
}

// dQ of one 64-query tile over its key chunks.
template <class T, int D>
__global__ void __launch_bounds__(kBlockThreads) sparse_flash_dq_kernel(SparseArgs sa) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int ld = ld_tile<D>;
  const Args& a = sa.base;
  T* Qs = reinterpret_cast<T*>(smem);
  T* dOs = Qs + kTile * ld;
  T* Ks = dOs + kTile * ld;
  T* Vs = Ks + kTile * ld;
  int* kpos = reinterpret_cast<int*>(smem + SparseBwdSmem<T, D>::stats);
  uint8_t* flags = reinterpret_cast<uint8_t*>(kpos + kTile);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y, b = bh / sa.H, h = bh % sa.H, T_ = a.Tq;
  const int64_t q0 = int64_t{blockIdx.x} * kTile;
  const T* Q = static_cast<const T*>(a.q) + bh * T_ * D;
  const T* K = static_cast<const T*>(a.k) + bh * T_ * D;
  const T* V = static_cast<const T*>(a.v) + bh * T_ * D;
  const T* dO = static_cast<const T*>(a.dO) + bh * T_ * D;
  load_tile<T, D>(Qs, Q, q0, T_);
  load_tile<T, D>(dOs, dO, q0, T_);
  const int64_t row0 = q0 + warp * 16;
  float lse[2], dvv[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t i = row0 + g + 8 * hr;
    lse[hr] = i < T_ ? a.lse_in[bh * T_ + i] : INFINITY;
    dvv[hr] = i < T_ ? a.dvec[bh * T_ + i] : 0.0f;
  }
  float dq[D / 8][4];
#pragma unroll
  for (int dt = 0; dt < D / 8; ++dt) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;
  const int64_t list = h * gridDim.x + blockIdx.x;
  for (int32_t e0 = sa.offsets[list]; e0 < sa.offsets[list + 1]; e0 += kChunks) {
    __syncthreads();
    gather_tile<T, D>(Ks, K, sa.chunks + e0, T_, kpos);
    gather_tile<T, D>(Vs, V, sa.chunks + e0, T_, nullptr);
    __syncthreads();
    chunk_flags(sa, b, h, q0, kpos, true, flags);
    __syncthreads();
    float sc[kTile / 8][4], dp[kTile / 8][4];
    mm_rows_bt<T, D>(sc, Qs + warp * 16 * ld, Ks);
    mm_rows_bt<T, D>(dp, dOs + warp * 16 * ld, Vs);
#pragma unroll
    for (int nt = 0; nt < kTile / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int hr = e >> 1, col = nt * 8 + 2 * t + (e & 1);
        const bool vis = visible_entry(sa, flags, warp * 16 + g + 8 * hr, col, b, h,
                                       row0 + g + 8 * hr, kpos[col]);
        float p;
        grad_entry(sc[nt][e], dp[nt][e], lse[hr], dvv[hr], vis, a.scale, p, sc[nt][e]);
      }
    mm_acc_regs<T, D>(dq, sc, Ks);  // dQ += dS K
  }
  store_acc<T, D>(static_cast<T*>(a.dq) + bh * T_ * D, row0, T_, dq);
}

// The chunk lists on the device. by_query: per (head, 64-query tile) the 16-key chunks any of
// its rows may see; else per (head, 64-key tile) the 16-query chunks that may see any of its
// keys. Each list is padded with -1 to a multiple of four chunks.
struct ChunkLists {
  TensorBase layout, offsets, chunks;
};

ChunkLists chunk_lists(const TensorBase& layout, int64_t T, bool causal, bool by_query, Device dev,
                       cudaStream_t stream) {
  const int64_t H = layout.shape()[0], n = layout.shape()[1], bs = T / n;
  const int64_t tiles = (T + kTile - 1) / kTile, nchunks = (T + kChunk - 1) / kChunk;
  TS_CHECK(H * tiles * nchunks < (int64_t{1} << 31), "block_sparse_attention: ", H, " heads x ", T,
           " positions is too large for the GPU kernel's chunk lists");
  const int64_t* lay = layout.data<int64_t>();
  std::vector<uint8_t> bytes(static_cast<size_t>(H * n * n));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = lay[i] != 0;
  std::vector<int32_t> offsets{0}, chunks;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      const int64_t t0 = tile * kTile, t1 = std::min(T, t0 + kTile);  // the tile's rows
      for (int64_t c = 0; c < nchunks; ++c) {
        const int64_t c0 = c * kChunk, c1 = std::min(T, c0 + kChunk);  // the chunk's rows
        const int64_t q0 = by_query ? t0 : c0, q1 = by_query ? t1 : c1;
        const int64_t k0 = by_query ? c0 : t0, k1 = by_query ? c1 : t1;
        if (causal && k0 > q1 - 1) continue;
        bool any = false;
        for (int64_t qb = q0 / bs; qb <= (q1 - 1) / bs && !any; ++qb)
          for (int64_t kb = k0 / bs; kb <= (k1 - 1) / bs && !any; ++kb)
            any = bytes[static_cast<size_t>((h * n + qb) * n + kb)] != 0;
        if (any) chunks.push_back(static_cast<int32_t>(c));
      }
      while ((chunks.size() - static_cast<size_t>(offsets.back())) % kChunks) chunks.push_back(-1);
      offsets.push_back(static_cast<int32_t>(chunks.size()));
    }
  auto upload = [&](const void* p, size_t n_bytes) {
    TensorBase t = scratch(static_cast<int64_t>(std::max<size_t>(n_bytes, 4)), dev);
    if (n_bytes)  // pageable: returns once staged, so the vectors may go
      TS_CUDA_CHECK(cudaMemcpyAsync(t.data_ptr(), p, n_bytes, cudaMemcpyHostToDevice, stream));
    return t;
  };
  return {upload(bytes.data(), bytes.size()),
          upload(offsets.data(), offsets.size() * sizeof(int32_t)),
          upload(chunks.data(), chunks.size() * sizeof(int32_t))};
}

SparseArgs sparse_args(const Args& base, const ChunkLists& l, const TensorBase& layout,
                       const TensorBase& key_mask, int64_t H, int64_t T) {
  SparseArgs s{base,
               static_cast<const uint8_t*>(l.layout.data_ptr()),
               static_cast<const int32_t*>(l.offsets.data_ptr()),
               static_cast<const int32_t*>(l.chunks.data_ptr()),
               key_mask.defined() ? static_cast<const bool*>(key_mask.data_ptr()) : nullptr,
               H,
               layout.shape()[1],
               T / layout.shape()[1]};
  return s;
}

dim3 grid_of(int64_t T, int64_t BH) {
  return dim3(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(BH));
}

}  // namespace

bool sparse_flash_supported(const TensorBase& q, const TensorBase& v) {
  const DType dt = q.dtype();
  const int64_t D = q.shape()[3];
  return (dt == DType::BFloat16 || dt == DType::Float16) && (D == 64 || D == 128) &&
         v.shape()[3] == D && q.shape()[0] * q.shape()[1] <= 65535 && q.shape()[2] > 0 &&
         std::getenv("TESSERA_ATTENTION_MATH") == nullptr;
}

void sparse_flash_forward(const TensorBase& q, const TensorBase& k, const TensorBase& v,
                          const TensorBase& layout, const TensorBase& key_mask, bool causal,
                          float scale, TensorBase& o, TensorBase& lse) {
  const int64_t B = q.shape()[0], H = q.shape()[1], T = q.shape()[2];
  cudaStream_t stream = stream_of(q);
  const ChunkLists lists = chunk_lists(layout, T, causal, true, q.device(), stream);
  Args a{};
  a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.out = o.data_ptr();
  a.lse = static_cast<float*>(lse.data_ptr());
  a.causal = causal, a.Tq = a.Tk = T, a.scale = scale;
  const SparseArgs sa = sparse_args(a, lists, layout, key_mask, H, T);
  dispatch(q.dtype(), q.shape()[3], [&]<class Ty, int D>() {
    constexpr size_t bytes = SparseFwdSmem<Ty, D>::bytes;
    static const bool ready = (allow_smem(sparse_flash_fwd_kernel<Ty, D>, bytes), true);
    (void)ready;
    sparse_flash_fwd_kernel<Ty, D><<<grid_of(T, B * H), kBlockThreads, bytes, stream>>>(sa);
    TS_CUDA_LAUNCH_CHECK("block_sparse_attention");
  });
}

void sparse_flash_backward(const TensorBase& dO, const TensorBase& q, const TensorBase& k,
                           const TensorBase& v, const TensorBase& o, const TensorBase& lse,
                           const TensorBase& layout, const TensorBase& key_mask, bool causal,
                           float scale, TensorBase& dq, TensorBase& dk, TensorBase& dv) {
  const int64_t B = q.shape()[0], H = q.shape()[1], T = q.shape()[2], D = q.shape()[3];
  cudaStream_t stream = stream_of(q);
  TensorBase dvec = scratch(B * H * T * int64_t{sizeof(float)}, q.device());
  const ChunkLists by_key = chunk_lists(layout, T, causal, false, q.device(), stream);
  const ChunkLists by_query = chunk_lists(layout, T, causal, true, q.device(), stream);
  Args a{};
  a.q = q.data_ptr(), a.k = k.data_ptr(), a.v = v.data_ptr(), a.o = o.data_ptr();
  a.dO = dO.data_ptr(), a.dq = dq.data_ptr(), a.dk = dk.data_ptr(), a.dv = dv.data_ptr();
  a.lse_in = static_cast<const float*>(lse.data_ptr());
  a.dvec = static_cast<const float*>(dvec.data_ptr());
  a.causal = causal, a.Tq = a.Tk = T, a.scale = scale;
  dispatch(q.dtype(), D, [&]<class Ty, int Dt>() {
    dvec_kernel<Ty>
        <<<static_cast<unsigned>((B * H * T + kWarps - 1) / kWarps), kBlockThreads, 0, stream>>>(
            static_cast<const Ty*>(dO.data_ptr()), static_cast<const Ty*>(o.data_ptr()),
            static_cast<float*>(dvec.data_ptr()), B * H * T, Dt);
    constexpr size_t bytes = SparseBwdSmem<Ty, Dt>::bytes;
    static const bool ready = (allow_smem(sparse_flash_dkdv_kernel<Ty, Dt>, bytes),
                               allow_smem(sparse_flash_dq_kernel<Ty, Dt>, bytes), true);
    (void)ready;
    sparse_flash_dkdv_kernel<Ty, Dt><<<grid_of(T, B * H), kBlockThreads, bytes, stream>>>(
        sparse_args(a, by_key, layout, key_mask, H, T));
    sparse_flash_dq_kernel<Ty, Dt><<<grid_of(T, B * H), kBlockThreads, bytes, stream>>>(
        sparse_args(a, by_query, layout, key_mask, H, T));
    TS_CUDA_LAUNCH_CHECK("block_sparse_attention_backward");
  });
}

}  // namespace tessera::cuda
