// Block-sparse attention on the GPU, with the CPU kernel's contract (backends/cpu/attention.cpp):
// forward  inputs: q, k [B,H,T,D], v [B,H,T,Dv] (contiguous, on the GPU), layout int64
//          [H, T/bs, T/bs] on the host (nonzero: computed), key padding mask (optional bool
//          [B, T] on the GPU, true = attend); attrs.flag = causal, scalar = scale;
//          outputs: o [B,H,T,Dv], lse [B,H,T] (compute type; -inf where every key is hidden)
// backward inputs: dO, q, k, v, o, lse, layout, mask; outputs: dq, dk, dv
// One warp per query row (forward, dq) or key row (dk, dv) walks only the blocks its layout row
// (column, for dk/dv) names, 32 keys at a time with an online softmax; no [T, T] matrix and no
// atomics: every output element is written by one warp in a fixed order (deterministic).
// The layout becomes two compressed lists on the device: per (head, query block) its key
// blocks, and per (head, key block) its query blocks (causal: none past the diagonal).
#include <algorithm>
#include <vector>

#include "block_sparse_flash.h"
#include "kernel_util.cuh"

namespace tessera::cuda {
namespace {

constexpr int kMaxWarps = 4;
constexpr int64_t kSmemMax = 48 * 1024;  // default dynamic shared memory per block

struct SparseShape {
  int64_t B, H, T, D, Dv, n, bs;
};

SparseShape shape_of(const TensorBase& q, const TensorBase& v, const TensorBase& layout) {
  const int64_t T = q.shape()[2], n = layout.shape()[1];
  return {q.shape()[0], q.shape()[1], T, q.shape()[3], v.shape()[3], n, n > 0 ? T / n : 0};
}

// Per (head, block) the blocks it meets, as offsets into one list (int32 on the device).
struct BlockLists {
  TensorBase offsets, blocks;
};

// by_row: per (h, query block i) its key blocks j; else per (h, key block j) its query blocks i.
BlockLists block_lists(const TensorBase& layout, const SparseShape& s, bool causal, bool by_row,
                       Device dev, cudaStream_t stream) {
  const int64_t n = s.n;
  TS_CHECK(s.H * n * n < (int64_t{1} << 31), "block_sparse_attention: layout ", layout.describe(),
           " has more blocks than the GPU kernel indexes (2^31)");
  const int64_t* lay = layout.data<int64_t>();
  std::vector<int32_t> offsets{0}, blocks;
  for (int64_t h = 0; h < s.H; ++h)
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t b = 0; b < n; ++b) {
        const int64_t i = by_row ? a : b, j = by_row ? b : a;
        if ((!causal || j <= i) && lay[(h * n + i) * n + j] != 0)
          blocks.push_back(static_cast<int32_t>(b));
      }
      offsets.push_back(static_cast<int32_t>(blocks.size()));
    }
  BlockLists out{
      scratch(static_cast<int64_t>(offsets.size() * sizeof(int32_t)), dev),
      scratch(static_cast<int64_t>(std::max<size_t>(blocks.size(), 1) * sizeof(int32_t)), dev)};
  // Pageable host memory: the call returns once the bytes are staged, so the vectors may go.
  TS_CUDA_CHECK(cudaMemcpyAsync(out.offsets.data_ptr(), offsets.data(),
                                offsets.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  if (!blocks.empty())
    TS_CUDA_CHECK(cudaMemcpyAsync(out.blocks.data_ptr(), blocks.data(),
                                  blocks.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  return out;
}

// Warps per block so that each warp's shared rows fit in 48 KB; 0 when one warp's do not.
int warps_for(int64_t row_bytes) {
  return static_cast<int>(std::min<int64_t>(kMaxWarps, kSmemMax / std::max<int64_t>(row_bytes, 1)));
}

struct Params {
  int64_t H, T, n, bs;
  int64_t row_bytes;  // each warp's shared memory: 32 positions, then its compute-type rows
  int D, Dv;
  bool causal;
  const bool* key_mask;  // [B, T] or null
  const int32_t* offsets;
  const int32_t* blocks;
};

template <class T, class A>
__device__ A dot_row(const A* x, const T* y, int n) {
  A acc = 0;
  for (int c = 0; c < n; ++c) acc += x[c] * load(y[c]);
  return acc;
}

// Warp `warp`'s shared memory: its 32 positions, then its compute-type values.
template <class A>
__device__ inline A* warp_rows(unsigned char* smem, const Params& p, int warp,
                               int64_t*& positions) {
  positions = reinterpret_cast<int64_t*>(smem + warp * p.row_bytes);
  return reinterpret_cast<A*>(positions + 32);
}

__device__ inline int chunk_size(int64_t total, int64_t base) {
  return total - base < 32 ? static_cast<int>(total - base) : 32;
}

// The 32 positions a warp looks at next: entry `idx` of the flattened list of positions in
// the blocks [first, last) of the compressed list.
__device__ inline int64_t position(const Params& p, int32_t first, int64_t idx) {
  return int64_t{p.blocks[first + idx / p.bs]} * p.bs + idx % p.bs;
}

template <class T, class A>
__global__ void sparse_forward_kernel(const T* q, const T* k, const T* v, T* o, A* lse, A scale,
                                      Params p) {
  extern __shared__ unsigned char smem_raw[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t per_head = (p.T + warps - 1) / warps;
  const int64_t bh = blockIdx.x / per_head, r = (blockIdx.x % per_head) * warps + warp;
  if (r >= p.T) return;
  const int64_t b = bh / p.H, h = bh % p.H;
  int64_t* st;  // this chunk's key positions
  A* sq = warp_rows<A>(smem_raw, p, warp, st);
  A* acc = sq + p.D;
  A* sp = acc + p.Dv;  // and their probabilities
  for (int c = lane; c < p.D; c += 32) sq[c] = load(q[(bh * p.T + r) * p.D + c]);
  for (int c = lane; c < p.Dv; c += 32) acc[c] = 0;
  __syncwarp();
  const int32_t first = p.offsets[h * p.n + r / p.bs], last = p.offsets[h * p.n + r / p.bs + 1];
  const int64_t total = int64_t{last - first} * p.bs;
  A m = -INFINITY, l = 0;
  for (int64_t base = 0; base < total; base += 32) {
    const int64_t idx = base + lane;
    const int64_t t = idx < total ? position(p, first, idx) : 0;
    const bool seen =
        idx < total && (!p.key_mask || p.key_mask[b * p.T + t]) && (!p.causal || t <= r);
    const A s = seen ? scale * dot_row(sq, k + (bh * p.T + t) * p.D, p.D) : A(-INFINITY);
    const A chunk_max = warp_reduce(s, MaxOp{});
    if (isinf(chunk_max)) continue;  // every key of the chunk hidden
    const A m_new = max(m, chunk_max), alpha = exp(m - m_new);
    const A pr = seen ? exp(s - m_new) : A(0);
    l = l * alpha + warp_reduce(pr, SumOp{});
    m = m_new;
    sp[lane] = pr;
    st[lane] = t;
    __syncwarp();
    const int count = chunk_size(total, base);
    for (int c = lane; c < p.Dv; c += 32) {
      A a = acc[c] * alpha;
      for (int j = 0; j < count; ++j)
        if (sp[j] != A(0)) a += sp[j] * load(v[(bh * p.T + st[j]) * p.Dv + c]);
      acc[c] = a;
    }
    __syncwarp();
  }
  const bool hidden = l == A(0);  // every key hidden: output 0 rather than NaN
  for (int c = lane; c < p.Dv; c += 32)
    o[(bh * p.T + r) * p.Dv + c] = convert<T>(hidden ? A(0) : acc[c] / l);
  if (lane == 0) lse[bh * p.T + r] = hidden ? A(-INFINITY) : m + log(l);
}

// dq per query row; also writes D_r = sum(dO_r * O_r), which the dk/dv pass reads.
template <class T, class A>
__global__ void sparse_dq_kernel(const T* dO, const T* q, const T* k, const T* v, const T* o,
                                 const A* lse, A* drow, T* dq, A scale, Params p) {
  extern __shared__ unsigned char smem_raw[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t per_head = (p.T + warps - 1) / warps;
  const int64_t bh = blockIdx.x / per_head, r = (blockIdx.x % per_head) * warps + warp;
  if (r >= p.T) return;
  const int64_t b = bh / p.H, h = bh % p.H, row = bh * p.T + r;
  int64_t* st;
  A* sq = warp_rows<A>(smem_raw, p, warp, st);
  A* sdo = sq + p.D;
  A* acc = sdo + p.Dv;
  A* sds = acc + p.D;
  A d = 0;
  for (int c = lane; c < p.Dv; c += 32) {
    sdo[c] = load(dO[row * p.Dv + c]);
    d += sdo[c] * load(o[row * p.Dv + c]);
  }
  d = warp_reduce(d, SumOp{});
  for (int c = lane; c < p.D; c += 32) {
    sq[c] = load(q[row * p.D + c]);
    acc[c] = 0;
  }
  if (lane == 0) drow[row] = d;
  __syncwarp();
  const A l = lse[row];
  const int32_t first = p.offsets[h * p.n + r / p.bs], last = p.offsets[h * p.n + r / p.bs + 1];
  const int64_t total = isinf(l) ? 0 : int64_t{last - first} * p.bs;
  for (int64_t base = 0; base < total; base += 32) {
    const int64_t idx = base + lane;
    const int64_t t = idx < total ? position(p, first, idx) : 0;
    const bool seen =
        idx < total && (!p.key_mask || p.key_mask[b * p.T + t]) && (!p.causal || t <= r);
    A ds = 0;
    if (seen) {
      const A pr = exp(scale * dot_row(sq, k + (bh * p.T + t) * p.D, p.D) - l);
      ds = pr * (dot_row(sdo, v + (bh * p.T + t) * p.Dv, p.Dv) - d) * scale;
    }
    sds[lane] = ds;
    st[lane] = t;
    __syncwarp();
    const int count = chunk_size(total, base);
    for (int c = lane; c < p.D; c += 32) {
      A a = acc[c];
      for (int j = 0; j < count; ++j)
        if (sds[j] != A(0)) a += sds[j] * load(k[(bh * p.T + st[j]) * p.D + c]);
      acc[c] = a;
    }
    __syncwarp();
  }
  for (int c = lane; c < p.D; c += 32) dq[row * p.D + c] = convert<T>(acc[c]);
}

// dk, dv per key row, over the query rows of the blocks that attend to its block.
template <class T, class A>
__global__ void sparse_dkv_kernel(const T* dO, const T* q, const T* k, const T* v, const A* lse,
                                  const A* drow, T* dk, T* dv, A scale, Params p) {
  extern __shared__ unsigned char smem_raw[];
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t per_head = (p.T + warps - 1) / warps;
  const int64_t bh = blockIdx.x / per_head, t = (blockIdx.x % per_head) * warps + warp;
  if (t >= p.T) return;
  const int64_t b = bh / p.H, h = bh % p.H, row = bh * p.T + t;
  int64_t* sr;
  A* sk = warp_rows<A>(smem_raw, p, warp, sr);
  A* sv = sk + p.D;
  A* dk_acc = sv + p.Dv;
  A* dv_acc = dk_acc + p.D;
  A* sp = dv_acc + p.Dv;
  A* sds = sp + 32;
  for (int c = lane; c < p.D; c += 32) {
    sk[c] = load(k[row * p.D + c]);
    dk_acc[c] = 0;
  }
  for (int c = lane; c < p.Dv; c += 32) {
    sv[c] = load(v[row * p.Dv + c]);
    dv_acc[c] = 0;
  }
  __syncwarp();
  const bool key_seen = !p.key_mask || p.key_mask[b * p.T + t];
  const int32_t first = p.offsets[h * p.n + t / p.bs], last = p.offsets[h * p.n + t / p.bs + 1];
  const int64_t total = key_seen ? int64_t{last - first} * p.bs : 0;
  for (int64_t base = 0; base < total; base += 32) {
    const int64_t idx = base + lane;
    const int64_t r = idx < total ? position(p, first, idx) : 0;
    const int64_t qrow = bh * p.T + r;
    const A l = lse[qrow];
    const bool seen = idx < total && !isinf(l) && (!p.causal || t <= r);
    A pr = 0, ds = 0;
    if (seen) {
      pr = exp(scale * dot_row(sk, q + qrow * p.D, p.D) - l);
      ds = pr * (dot_row(sv, dO + qrow * p.Dv, p.Dv) - drow[qrow]) * scale;
    }
    sp[lane] = pr;
    sds[lane] = ds;
    sr[lane] = r;
    __syncwarp();
    const int count = chunk_size(total, base);
    for (int c = lane; c < p.Dv; c += 32) {
      A a = dv_acc[c];
      for (int j = 0; j < count; ++j)
        if (sp[j] != A(0)) a += sp[j] * load(dO[(bh * p.T + sr[j]) * p.Dv + c]);
      dv_acc[c] = a;
    }
    for (int c = lane; c < p.D; c += 32) {
      A a = dk_acc[c];
      for (int j = 0; j < count; ++j)
        if (sds[j] != A(0)) a += sds[j] * load(q[(bh * p.T + sr[j]) * p.D + c]);
      dk_acc[c] = a;
    }
    __syncwarp();
  }
  for (int c = lane; c < p.D; c += 32) dk[row * p.D + c] = convert<T>(dk_acc[c]);
  for (int c = lane; c < p.Dv; c += 32) dv[row * p.Dv + c] = convert<T>(dv_acc[c]);
}

// Each warp's shared bytes: 32 positions and `floats` compute-type values, 16-byte aligned.
template <class A>
int64_t row_bytes_for(int64_t floats) {
  return (32 * int64_t{sizeof(int64_t)} + floats * int64_t{sizeof(A)} + 15) / 16 * 16;
}

template <class A>
Params params_of(const SparseShape& s, int64_t floats, bool causal, const TensorBase& mask,
                 const BlockLists& l) {
  return {s.H,
          s.T,
          s.n,
          s.bs,
          row_bytes_for<A>(floats),
          static_cast<int>(s.D),
          static_cast<int>(s.Dv),
          causal,
          mask.defined() ? mask.data<bool>() : nullptr,
          static_cast<const int32_t*>(l.offsets.data_ptr()),
          static_cast<const int32_t*>(l.blocks.data_ptr())};
}

// Launches `kernel` with one warp per row of every head, p.row_bytes of shared memory each.
template <class Kernel, class... Args>
void launch_rows(const char* name, Kernel kernel, const SparseShape& s, const Params& p,
                 cudaStream_t stream, Args... args) {
  const int64_t row_bytes = p.row_bytes;
  const int warps = warps_for(row_bytes);
  TS_CHECK(warps >= 1, name, ": head sizes ", s.D, " and ", s.Dv,
           " are too large for the GPU kernel's shared memory (", row_bytes, " bytes a row)");
  const int64_t blocks = s.B * s.H * ((s.T + warps - 1) / warps);
  TS_CHECK(blocks < (int64_t{1} << 31), name, ": too many rows for one launch (", blocks, ")");
  kernel<<<static_cast<unsigned>(blocks), warps * 32, warps * row_bytes, stream>>>(args..., p);
  TS_CUDA_LAUNCH_CHECK(name);
}

template <class T>
struct BlockSparseAttention {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const TensorBase &q = c.inputs[0], &k = c.inputs[1], &v = c.inputs[2];
    const SparseShape s = shape_of(q, v, c.inputs[3]);
    if (s.B * s.H * s.T == 0) return;
    const bool causal = c.attrs.flag;
    if (sparse_flash_supported(q, v)) {
      sparse_flash_forward(q, k, v, c.inputs[3], c.inputs[4], causal,
                           static_cast<float>(c.attrs.scalar), c.outputs[0], c.outputs[1]);
      return;
    }
    cudaStream_t stream = stream_of(q);
    const BlockLists rows = block_lists(c.inputs[3], s, causal, true, q.device(), stream);
    launch_rows("block_sparse_attention", sparse_forward_kernel<T, A>, s,
                params_of<A>(s, s.D + s.Dv + 32, causal, c.inputs[4], rows), stream,
                static_cast<const T*>(q.data_ptr()), static_cast<const T*>(k.data_ptr()),
                static_cast<const T*>(v.data_ptr()), static_cast<T*>(c.outputs[0].data_ptr()),
                static_cast<A*>(c.outputs[1].data_ptr()), static_cast<A>(c.attrs.scalar));
  }
};

template <class T>
struct BlockSparseAttentionBackward {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const TensorBase &dO = c.inputs[0], &q = c.inputs[1], &k = c.inputs[2], &v = c.inputs[3];
    const TensorBase &o = c.inputs[4], &lse = c.inputs[5], &layout = c.inputs[6];
    const SparseShape s = shape_of(q, v, layout);
    if (s.B * s.H * s.T == 0) return;
    const Device dev = q.device();
    cudaStream_t stream = stream_of(q);
    const bool causal = c.attrs.flag;
    if (sparse_flash_supported(q, v)) {
      sparse_flash_backward(dO, q, k, v, o, lse, layout, c.inputs[7], causal,
                            static_cast<float>(c.attrs.scalar), c.outputs[0], c.outputs[1],
                            c.outputs[2]);
      return;
    }
    const A scale = static_cast<A>(c.attrs.scalar);
    const auto in = [](const TensorBase& t) { return static_cast<const T*>(t.data_ptr()); };
    const auto out = [](const TensorBase& t) { return static_cast<T*>(t.data_ptr()); };
    const char* name = "block_sparse_attention_backward";
    TensorBase drow = scratch(s.B * s.H * s.T * int64_t{sizeof(A)}, dev);
    const BlockLists rows = block_lists(layout, s, causal, true, dev, stream);
    launch_rows(name, sparse_dq_kernel<T, A>, s,
                params_of<A>(s, 2 * s.D + s.Dv + 32, causal, c.inputs[7], rows), stream, in(dO),
                in(q), in(k), in(v), in(o), static_cast<const A*>(lse.data_ptr()),
                static_cast<A*>(drow.data_ptr()), out(c.outputs[0]), scale);
    const BlockLists cols = block_lists(layout, s, causal, false, dev, stream);
    launch_rows(name, sparse_dkv_kernel<T, A>, s,
                params_of<A>(s, 2 * s.D + 2 * s.Dv + 64, causal, c.inputs[7], cols), stream, in(dO),
                in(q), in(k), in(v), static_cast<const A*>(lse.data_ptr()),
                static_cast<const A*>(drow.data_ptr()), out(c.outputs[1]), out(c.outputs[2]),
                scale);
  }
};

const bool registered = [] {
  register_floating<BlockSparseAttention>(Kernel::block_sparse_attention);
  register_floating<BlockSparseAttentionBackward>(Kernel::block_sparse_attention_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
