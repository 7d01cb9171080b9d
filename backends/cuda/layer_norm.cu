// Fused layer_norm over the last dim of a contiguous [N, C] input: one warp per row for
// rows up to 1024 wide, one block per row beyond.
// forward  inputs: x, weight (optional), bias (optional); attrs.scalar = eps
//          outputs: y [N, C], mean [N], rstd [N] (in the compute type)
// backward inputs: dy, x, mean, rstd, weight (optional); outputs: dx, dweight, dbias
//          (optional). dweight/dbias: each block of kRowsPerBlock rows writes its own partial
//          row, then one thread per column sums the partials in order (deterministic).
#include "kernel_util.cuh"
#include "layer_norm_vector.cuh"

namespace tessera::cuda {
namespace {

constexpr int64_t kRowsPerBlock = 32;

template <class T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean,
                                  compute_t<T>* rstd, int64_t C, compute_t<T> eps) {
  using A = compute_t<T>;
  const int64_t base = blockIdx.x * C;
  A s = 0;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) s += A(load(x[base + j]));
  const A m = block_reduce<kThreads>(s, SumOp{}) / A(C);
  A v = 0;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) {
    const A d = A(load(x[base + j])) - m;
    v += d * d;
  }
  const A rs = A(1) / sqrt(block_reduce<kThreads>(v, SumOp{}) / A(C) + eps);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = m;
    rstd[blockIdx.x] = rs;
  }
  for (int64_t j = threadIdx.x; j < C; j += kThreads) {
    A o = (A(load(x[base + j])) - m) * rs;
    if (w) o *= A(load(w[j]));
    if (b) o += A(load(b[j]));
    y[base + j] = convert<T>(o);
  }
}

template <class T>
__global__ void layer_norm_backward_kernel(const T* dy, const T* x, const compute_t<T>* mean,
                                           const compute_t<T>* rstd, const T* w, T* dx,
                                           compute_t<T>* part_dw, compute_t<T>* part_db, int64_t N,
                                           int64_t C) {
  using A = compute_t<T>;
  const int64_t r0 = blockIdx.x * kRowsPerBlock, r1 = min(N, r0 + kRowsPerBlock);
  A* pdw = part_dw ? part_dw + blockIdx.x * C : nullptr;
  A* pdb = part_db ? part_db + blockIdx.x * C : nullptr;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) {
    if (pdw) pdw[j] = 0;
    if (pdb) pdb[j] = 0;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t base = r * C;
    const A m = mean[r], rs = rstd[r];
    // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w
    A sg = 0, sgx = 0;
    for (int64_t j = threadIdx.x; j < C; j += kThreads) {
      const A xhat = (A(load(x[base + j])) - m) * rs;
      const A d = load(dy[base + j]);
      const A g = d * (w ? A(load(w[j])) : A(1));
      sg += g;
      sgx += g * xhat;
      if (pdw) pdw[j] += d * xhat;  // each thread owns its columns: no race
      if (pdb) pdb[j] += d;
    }
    sg = block_reduce<kThreads>(sg, SumOp{}) / A(C);
    sgx = block_reduce<kThreads>(sgx, SumOp{}) / A(C);
    for (int64_t j = threadIdx.x; j < C; j += kThreads) {
      const A xhat = (A(load(x[base + j])) - m) * rs;
      const A g = A(load(dy[base + j])) * (w ? A(load(w[j])) : A(1));
      dx[base + j] = convert<T>(rs * (g - sg - xhat * sgx));
    }
  }
}

// Column sums of a [rows, C] partial table: a block per 32 columns and segment of seg_rows
// rows (blockIdx.y), warp w summing the segment's rows w, w + 8, ... in order, then the 8
// warp sums in warp order (a fixed order: deterministic); out row blockIdx.y.
template <class A, class O>
__global__ void sum_partials_kernel(const A* part, int64_t rows, int64_t C, int64_t seg_rows,
                                    O* out) {
  __shared__ A sums[8][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t j = blockIdx.x * int64_t{32} + lane;
  const int64_t first = blockIdx.y * seg_rows, last = min(rows, first + seg_rows);
  A s = 0;
  if (j < C) {
#pragma unroll 8
    for (int64_t r = first + warp; r < last; r += 8) s += part[r * C + j];
  }
  sums[warp][lane] = s;
  __syncthreads();
  if (warp == 0 && j < C) {
    A t = sums[0][lane];
    for (int k = 1; k < 8; ++k) t += sums[k][lane];
    out[blockIdx.y * C + j] = convert<O>(t);
  }
}

unsigned column_blocks(int64_t C) {
  return static_cast<unsigned>((C + 31) / 32);
}

// Rows that fit (8 per block in 48 KB of shared memory): one warp per row, the row read once,
// reductions by warp shuffles only. Backward uses one warp per row up to kWarpRowMax wide.
constexpr int64_t kWarpRowMax = 1024;
constexpr int64_t kWarpSmemMax = 48 * 1024;  // default dynamic shared memory per block
constexpr int kWarpsPerBlock = 8;

template <class T>
__global__ void layer_norm_warp_kernel(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean,
                                       compute_t<T>* rstd, int64_t N, int64_t C, compute_t<T> eps) {
  using A = compute_t<T>;
  extern __shared__ unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  A* cache = reinterpret_cast<A*>(smem_raw) + warp * C;
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + warp;
  if (row >= N) return;
  const T* xr = x + row * C;
  A s = 0;
  for (int64_t j = lane; j < C; j += 32) {
    const A v = load(xr[j]);
    cache[j] = v;
    s += v;
  }
  const A m = warp_reduce(s, SumOp{}) / A(C);
  A v = 0;
  for (int64_t j = lane; j < C; j += 32) {
    const A d = cache[j] - m;
    v += d * d;
  }
  const A rs = A(1) / sqrt(warp_reduce(v, SumOp{}) / A(C) + eps);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
  T* yr = y + row * C;
  for (int64_t j = lane; j < C; j += 32) {
    A o = (cache[j] - m) * rs;
    if (w) o *= A(load(w[j]));
    if (b) o += A(load(b[j]));
    yr[j] = convert<T>(o);
  }
}

// Backward, one warp per row, kRowsPerWarp consecutive rows per warp; each warp accumulates
// dweight/dbias into its own partial row (lanes own columns), summed later in warp order.
constexpr int64_t kRowsPerWarp = 4;

template <class T>
__global__ void layer_norm_backward_warp_kernel(const T* dy, const T* x, const compute_t<T>* mean,
                                                const compute_t<T>* rstd, const T* w, T* dx,
                                                compute_t<T>* part_dw, compute_t<T>* part_db,
                                                int64_t N, int64_t C) {
  using A = compute_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t gw = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int64_t r0 = gw * kRowsPerWarp;
  if (r0 >= N) return;
  const int64_t r1 = min(N, r0 + kRowsPerWarp);
  A* pdw = part_dw ? part_dw + gw * C : nullptr;
  A* pdb = part_db ? part_db + gw * C : nullptr;
  for (int64_t j = lane; j < C; j += 32) {
    if (pdw) pdw[j] = 0;
    if (pdb) pdb[j] = 0;
  }
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = x + r * C;
    const T* dyr = dy + r * C;
    const A m = mean[r], rs = rstd[r];
    A sg = 0, sgx = 0;
    for (int64_t j = lane; j < C; j += 32) {
      const A xhat = (A(load(xr[j])) - m) * rs;
      const A d = load(dyr[j]);
      const A g = d * (w ? A(load(w[j])) : A(1));
      sg += g;
      sgx += g * xhat;
      if (pdw) pdw[j] += d * xhat;
      if (pdb) pdb[j] += d;
    }
    sg = warp_reduce(sg, SumOp{}) / A(C);
    sgx = warp_reduce(sgx, SumOp{}) / A(C);
    T* dxr = dx + r * C;
    for (int64_t j = lane; j < C; j += 32) {
      const A xhat = (A(load(xr[j])) - m) * rs;
      const A g = A(load(dyr[j])) * (w ? A(load(w[j])) : A(1));
      dxr[j] = convert<T>(rs * (g - sg - xhat * sgx));
    }
  }
}

template <class T>
const T* optional_ptr(const TensorBase& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <class T>
struct LayerNorm {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const TensorBase& x = c.inputs[0];
    const int64_t N = x.shape()[0], C = x.shape()[1];
    if (N == 0) return;
    const int vec = vec_packs_per_lane<T>(C, false);
    if (vec && C % pack_elems<T>() == 0 && aligned16(x.data_ptr()) &&
        aligned16(c.outputs[0].data_ptr()) &&
        (!c.inputs[1].defined() || aligned16(c.inputs[1].data_ptr())) &&
        (!c.inputs[2].defined() || aligned16(c.inputs[2].data_ptr()))) {
      const auto blocks = static_cast<unsigned>((N + kVecWarpsPerBlock - 1) / kVecWarpsPerBlock);
      with_packs<8>(vec, [&](auto k) {
        layer_norm_vec_kernel<T, decltype(k)::value>
            <<<blocks, kVecWarpsPerBlock * 32, 0, stream_of(x)>>>(
                static_cast<const T*>(x.data_ptr()), optional_ptr<T>(c.inputs[1]),
                optional_ptr<T>(c.inputs[2]), static_cast<T*>(c.outputs[0].data_ptr()),
                static_cast<A*>(c.outputs[1].data_ptr()), static_cast<A*>(c.outputs[2].data_ptr()),
                N, C, static_cast<A>(c.attrs.scalar));
      });
      TS_CUDA_LAUNCH_CHECK("layer_norm");
      return;
    }
    if (C * static_cast<int64_t>(sizeof(A)) * kWarpsPerBlock <= kWarpSmemMax) {
      const auto blocks = static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock);
      const size_t smem = kWarpsPerBlock * C * sizeof(A);
      layer_norm_warp_kernel<T><<<blocks, kWarpsPerBlock * 32, smem, stream_of(x)>>>(
          static_cast<const T*>(x.data_ptr()), optional_ptr<T>(c.inputs[1]),
          optional_ptr<T>(c.inputs[2]), static_cast<T*>(c.outputs[0].data_ptr()),
          static_cast<A*>(c.outputs[1].data_ptr()), static_cast<A*>(c.outputs[2].data_ptr()), N, C,
          static_cast<A>(c.attrs.scalar));
      TS_CUDA_LAUNCH_CHECK("layer_norm");
      return;
    }
    layer_norm_kernel<T><<<static_cast<unsigned>(N), kThreads, 0, stream_of(x)>>>(
        static_cast<const T*>(x.data_ptr()), optional_ptr<T>(c.inputs[1]),
        optional_ptr<T>(c.inputs[2]), static_cast<T*>(c.outputs[0].data_ptr()),
        static_cast<A*>(c.outputs[1].data_ptr()), static_cast<A*>(c.outputs[2].data_ptr()), C,
        static_cast<A>(c.attrs.scalar));
    TS_CUDA_LAUNCH_CHECK("layer_norm");
  }
};

template <class T>
struct LayerNormBackward {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const TensorBase& x = c.inputs[1];
    const int64_t N = x.shape()[0], C = x.shape()[1];
    const bool want_dw = c.outputs.size() > 1 && c.outputs[1].defined();
    const bool want_db = c.outputs.size() > 2 && c.outputs[2].defined();
    cudaStream_t stream = stream_of(x);
    if (N == 0) {
      for (int k = 1; k <= 2; ++k)
        if (c.outputs.size() > static_cast<size_t>(k) && c.outputs[k].defined())
          TS_CUDA_CHECK(cudaMemsetAsync(c.outputs[k].data_ptr(), 0, c.outputs[k].nbytes(), stream));
      return;
    }
    // One partial dweight/dbias row per warp (rows up to kWarpRowMax wide) or per block of
    // kRowsPerBlock rows, in row order, so the column sums below keep a fixed order.
    const bool per_warp = C <= kWarpRowMax;
    const int64_t rows_per_partial = per_warp ? kRowsPerWarp : kRowsPerBlock;
    const int64_t partials = (N + rows_per_partial - 1) / rows_per_partial;
    const int64_t bytes = partials * C * static_cast<int64_t>(sizeof(A));
    TensorBase pdw = want_dw ? scratch(bytes, x.device()) : TensorBase();
    TensorBase pdb = want_db ? scratch(bytes, x.device()) : TensorBase();
    const T* dy = static_cast<const T*>(c.inputs[0].data_ptr());
    const T* px = static_cast<const T*>(x.data_ptr());
    const A* mean = static_cast<const A*>(c.inputs[2].data_ptr());
    const A* rstd = static_cast<const A*>(c.inputs[3].data_ptr());
    T* dx = static_cast<T*>(c.outputs[0].data_ptr());
    A* part_dw = want_dw ? static_cast<A*>(pdw.data_ptr()) : nullptr;
    A* part_db = want_db ? static_cast<A*>(pdb.data_ptr()) : nullptr;
    const T* w = optional_ptr<T>(c.inputs[4]);
    const int vec = vec_packs_per_lane<T>(C, true);
    if (per_warp && vec && C % pack_elems<T>() == 0 && aligned16(dy) && aligned16(px) &&
        aligned16(dx) && (!w || aligned16(w))) {
      const auto grid =
          static_cast<unsigned>((partials + kVecBackwardWarps - 1) / kVecBackwardWarps);
      with_packs<32 / pack_elems<T>()>(vec, [&](auto k) {
        layer_norm_backward_vec_kernel<T, decltype(k)::value>
            <<<grid, kVecBackwardWarps * 32, 0, stream>>>(dy, px, mean, rstd, w, dx, part_dw,
                                                          part_db, N, C, kRowsPerWarp);
      });
    } else if (per_warp) {
      const auto grid = static_cast<unsigned>((partials + kWarpsPerBlock - 1) / kWarpsPerBlock);
      layer_norm_backward_warp_kernel<T><<<grid, kWarpsPerBlock * 32, 0, stream>>>(
          dy, px, mean, rstd, w, dx, part_dw, part_db, N, C);
    } else {
      layer_norm_backward_kernel<T><<<static_cast<unsigned>(partials), kThreads, 0, stream>>>(
          dy, px, mean, rstd, w, dx, part_dw, part_db, N, C);
    }
    TS_CUDA_LAUNCH_CHECK("layer_norm_backward");
    // Many partial rows: first sums of segments of them (more blocks at work), then the
    // segments' sums in order; both orders are fixed.
    const int64_t segments = std::min<int64_t>(32, (partials + 63) / 64);
    const int64_t seg_rows = (partials + segments - 1) / segments;
    TensorBase level2 = segments > 1
                            ? scratch(segments * C * static_cast<int64_t>(sizeof(A)), x.device())
                            : TensorBase();
    auto column_sums = [&](const A* part, TensorBase& out) {
      T* o = static_cast<T*>(out.data_ptr());
      if (segments == 1) {
        sum_partials_kernel<<<column_blocks(C), 256, 0, stream>>>(part, partials, C, partials, o);
        return;
      }
      A* mid = static_cast<A*>(level2.data_ptr());
      sum_partials_kernel<<<dim3(column_blocks(C), static_cast<unsigned>(segments)), 256, 0,
                            stream>>>(part, partials, C, seg_rows, mid);
      sum_partials_kernel<<<column_blocks(C), 256, 0, stream>>>(static_cast<const A*>(mid),
                                                                segments, C, segments, o);
    };
    if (want_dw) column_sums(part_dw, c.outputs[1]);
    if (want_db) column_sums(part_db, c.outputs[2]);
    TS_CUDA_LAUNCH_CHECK("layer_norm_backward");
  }
};

const bool registered = [] {
  register_floating<LayerNorm>(Kernel::layer_norm);
  register_floating<LayerNormBackward>(Kernel::layer_norm_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
