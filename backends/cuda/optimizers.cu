// Fused multi-tensor optimizer updates: one launch updates every parameter of a group. The
// host cuts all tensors into fixed chunks and uploads one table of pointers; each block
// updates one chunk. Same contracts (and per-element formulas) as the CPU kernels
// (backends/cpu/optimizers.cpp), including 16-bit gradients scaled by grad_scale and the
// 16-bit model copies written in the same pass:
//   adamw_step, sgd_step, lamb_step; lamb's per-tensor trust ratio comes from per-chunk
//              partial norms summed in chunk order (deterministic).
//   sum_squares inputs tensors[n]; outputs [n] float64 sums of squares (per-chunk partials in
//              double, then each tensor's chunks summed in order: deterministic).
#include <vector>

#include "kernel_util.cuh"

namespace tessera::cuda {
namespace {

constexpr int64_t kChunkElems = 1 << 16;

template <class T, class G>
struct TensorSlots {
  T* p;
  T* m;  // exp_avg or momentum buffer (may be null)
  T* v;  // exp_avg_sq (may be null)
  const G* g;
  G* copy;  // 16-bit model copy (may be null)
  int64_t n;
};
struct Chunk {
  int32_t tensor;
  int64_t begin, end;
};

// Uploads the slot and chunk tables into one device buffer. state_tensors: how many state
// blocks of n outputs follow the parameters (the model copies, if any, come after them).
template <class T, class G>
struct Table {
  TensorBase buffer;
  const TensorSlots<T, G>* slots = nullptr;
  const Chunk* chunks = nullptr;
  int64_t nchunks = 0;

  Table(const KernelCall& c, int state_tensors) {
    const size_t n = c.inputs.size();
    const size_t first_copy = n * (1 + state_tensors);
    const bool copies = c.outputs.size() > first_copy;
    std::vector<TensorSlots<T, G>> slots_h(n);
    std::vector<Chunk> chunks_h;
    for (size_t t = 0; t < n; ++t) {
      const int64_t len = c.outputs[t].numel();
      slots_h[t] = {static_cast<T*>(c.outputs[t].data_ptr()),
                    state_tensors >= 1 ? static_cast<T*>(c.outputs[n + t].data_ptr()) : nullptr,
                    state_tensors >= 2 ? static_cast<T*>(c.outputs[2 * n + t].data_ptr()) : nullptr,
                    static_cast<const G*>(c.inputs[t].data_ptr()),
                    copies ? static_cast<G*>(c.outputs[first_copy + t].data_ptr()) : nullptr,
                    len};
      for (int64_t b = 0; b < len; b += kChunkElems)
        chunks_h.push_back({static_cast<int32_t>(t), b, std::min(len, b + kChunkElems)});
    }
    nchunks = static_cast<int64_t>(chunks_h.size());
    const size_t slot_bytes = (n * sizeof(TensorSlots<T, G>) + 255) / 256 * 256;
    const size_t bytes = slot_bytes + chunks_h.size() * sizeof(Chunk);
    const Device dev = c.outputs[0].device();
    buffer = scratch(static_cast<int64_t>(bytes), dev);
    char* base = static_cast<char*>(buffer.data_ptr());
    cudaStream_t stream = stream_for(dev);
    TS_CUDA_CHECK(cudaMemcpyAsync(base, slots_h.data(), n * sizeof(TensorSlots<T, G>),
                                  cudaMemcpyHostToDevice, stream));
    if (!chunks_h.empty())
      TS_CUDA_CHECK(cudaMemcpyAsync(base + slot_bytes, chunks_h.data(),
                                    chunks_h.size() * sizeof(Chunk), cudaMemcpyHostToDevice,
                                    stream));
    slots = reinterpret_cast<const TensorSlots<T, G>*>(base);
    chunks = reinterpret_cast<const Chunk*>(base + slot_bytes);
  }
};

template <class T>
struct AdamParams {
  T lr, b1, b2, eps, wd, bc1, bc2_sqrt, scale;
  bool decoupled;
};

template <class T, class G>
__global__ void adamw_kernel(const TensorSlots<T, G>* slots, const Chunk* chunks, AdamParams<T> h) {
  const Chunk ch = chunks[blockIdx.x];
  const TensorSlots<T, G> s = slots[ch.tensor];
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kThreads) {
    T p = s.p[i], grad = T(load(s.g[i])) * h.scale;
    if (h.decoupled)
      p -= h.lr * h.wd * p;
    else
      grad += h.wd * p;
    const T m = h.b1 * s.m[i] + (T(1) - h.b1) * grad;
    const T v = h.b2 * s.v[i] + (T(1) - h.b2) * grad * grad;
    s.m[i] = m;
    s.v[i] = v;
    const T denom = sqrt(v) / h.bc2_sqrt + h.eps;
    p -= (h.lr / h.bc1) * m / denom;
    s.p[i] = p;
    if (s.copy) s.copy[i] = convert<G>(p);
  }
}

template <class T>
struct AdamW {
  static void run(const KernelCall& c) {
    if (c.inputs.empty()) return;
    Types::visit_grad<T>(c, [&]<class G>() {
      const auto& s = optimizer_step_params<AdamWStepParams>(c.attrs.optimizer_step, "adamw_step");
      const Table<T, G> table(c, 2);
      if (table.nchunks == 0) return;
      const AdamParams<T> h{T(s.lr),
                            T(s.beta1),
                            T(s.beta2),
                            T(s.eps),
                            T(s.weight_decay),
                            T(s.bias_correction1),
                            T(std::sqrt(s.bias_correction2)),
                            T(s.grad_scale),
                            s.decoupled};
      adamw_kernel<T, G>
          <<<static_cast<unsigned>(table.nchunks), kThreads, 0, stream_of(c.outputs[0])>>>(
              table.slots, table.chunks, h);
      TS_CUDA_LAUNCH_CHECK("adamw_step");
    });
  }
};

template <class T>
struct SgdParams {
  T lr, mom, damp, wd, scale;
  bool nesterov, first;
};

template <class T, class G>
__global__ void sgd_kernel(const TensorSlots<T, G>* slots, const Chunk* chunks, SgdParams<T> h) {
  const Chunk ch = chunks[blockIdx.x];
  const TensorSlots<T, G> s = slots[ch.tensor];
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kThreads) {
    T d = T(load(s.g[i])) * h.scale + h.wd * s.p[i];
    if (s.m) {
      const T b = h.first ? d : h.mom * s.m[i] + (T(1) - h.damp) * d;
      s.m[i] = b;
      d = h.nesterov ? d + h.mom * b : b;
    }
    const T p = s.p[i] - h.lr * d;
    s.p[i] = p;
    if (s.copy) s.copy[i] = convert<G>(p);
  }
}

template <class T>
struct Sgd {
  static void run(const KernelCall& c) {
    if (c.inputs.empty()) return;
    Types::visit_grad<T>(c, [&]<class G>() {
      const auto& s = optimizer_step_params<SgdStepParams>(c.attrs.optimizer_step, "sgd_step");
      const bool momentum = s.momentum != 0.0;
      const Table<T, G> table(c, momentum ? 1 : 0);
      if (table.nchunks == 0) return;
      const SgdParams<T> h{T(s.lr),         T(s.momentum), T(s.dampening), T(s.weight_decay),
                           T(s.grad_scale), s.nesterov,    s.first_step};
      sgd_kernel<T, G>
          <<<static_cast<unsigned>(table.nchunks), kThreads, 0, stream_of(c.outputs[0])>>>(
              table.slots, table.chunks, h);
      TS_CUDA_LAUNCH_CHECK("sgd_step");
    });
  }
};

template <class T>
struct LambParams {
  T lr, b1, b2, eps, wd, bc1, bc2, max_c, min_c, scale;
};

template <class T, class G>
__device__ T lamb_update(const TensorSlots<T, G>& s, int64_t i, const LambParams<T>& h) {
  return (s.m[i] / h.bc1) / (sqrt(s.v[i] / h.bc2) + h.eps) + h.wd * s.p[i];
}

// Moments, then per-chunk partial sums of ||p||^2 and ||update||^2 (in double).
template <class T, class G>
__global__ void lamb_moments_kernel(const TensorSlots<T, G>* slots, const Chunk* chunks,
                                    LambParams<T> h, double* partial) {
  const Chunk ch = chunks[blockIdx.x];
  const TensorSlots<T, G> s = slots[ch.tensor];
  double pn = 0, un = 0;
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kThreads) {
    const T g = T(load(s.g[i])) * h.scale;
    s.m[i] = h.b1 * s.m[i] + (T(1) - h.b1) * g;
    s.v[i] = h.b2 * s.v[i] + (T(1) - h.b2) * g * g;
    const T u = lamb_update(s, i, h);
    pn += double(s.p[i]) * double(s.p[i]);
    un += double(u) * double(u);
  }
  pn = block_reduce<kThreads>(pn, SumOp{});
  un = block_reduce<kThreads>(un, SumOp{});
  if (threadIdx.x == 0) {
    partial[2 * blockIdx.x] = pn;
    partial[2 * blockIdx.x + 1] = un;
  }
}

// One thread per tensor: its chunks' partials in order -> clamped trust ratio.
template <class T>
__global__ void lamb_ratio_kernel(const Chunk* chunks, int64_t nchunks, const double* partial,
                                  int64_t ntensors, LambParams<T> h, T* ratio) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= ntensors) return;
  double pn = 0, un = 0;
  for (int64_t k = 0; k < nchunks; ++k)
    if (chunks[k].tensor == t) {
      pn += partial[2 * k];
      un += partial[2 * k + 1];
    }
  pn = sqrt(pn);
  un = sqrt(un);
  T r = (pn > 0 && un > 0) ? T(pn / un) : T(1);
  ratio[t] = min(h.max_c, max(h.min_c, r));
}

template <class T, class G>
__global__ void lamb_apply_kernel(const TensorSlots<T, G>* slots, const Chunk* chunks,
                                  LambParams<T> h, const T* ratio) {
  const Chunk ch = chunks[blockIdx.x];
  const TensorSlots<T, G> s = slots[ch.tensor];
  const T r = ratio[ch.tensor];
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kThreads) {
    const T p = s.p[i] - h.lr * r * lamb_update(s, i, h);
    s.p[i] = p;
    if (s.copy) s.copy[i] = convert<G>(p);
  }
}

template <class T>
struct Lamb {
  static void run(const KernelCall& c) {
    if (c.inputs.empty()) return;
    Types::visit_grad<T>(c, [&]<class G>() {
      const auto& s = optimizer_step_params<LambStepParams>(c.attrs.optimizer_step, "lamb_step");
      const Table<T, G> table(c, 2);
      if (table.nchunks == 0) return;
      const LambParams<T> h{T(s.lr),
                            T(s.beta1),
                            T(s.beta2),
                            T(s.eps),
                            T(s.weight_decay),
                            T(s.bias_correction1),
                            T(s.bias_correction2),
                            T(s.max_coeff),
                            T(s.min_coeff),
                            T(s.grad_scale)};
      const Device dev = c.outputs[0].device();
      cudaStream_t stream = stream_for(dev);
      const int64_t nt = static_cast<int64_t>(c.inputs.size());
      TensorBase partial = scratch(table.nchunks * 16, dev);
      TensorBase ratio = scratch(nt * static_cast<int64_t>(sizeof(T)), dev);
      const auto blocks = static_cast<unsigned>(table.nchunks);
      lamb_moments_kernel<T, G><<<blocks, kThreads, 0, stream>>>(
          table.slots, table.chunks, h, static_cast<double*>(partial.data_ptr()));
      lamb_ratio_kernel<T><<<grid_for(nt), kThreads, 0, stream>>>(
          table.chunks, table.nchunks, static_cast<const double*>(partial.data_ptr()), nt, h,
          static_cast<T*>(ratio.data_ptr()));
      lamb_apply_kernel<T, G><<<blocks, kThreads, 0, stream>>>(
          table.slots, table.chunks, h, static_cast<const T*>(ratio.data_ptr()));
      TS_CUDA_LAUNCH_CHECK("lamb_step");
    });
  }
};

struct ReadChunk {
  const void* ptr;
  int64_t begin, end;
  int32_t tensor;
};

template <class T>
__global__ void sum_squares_chunks_kernel(const ReadChunk* chunks, double* partial) {
  const ReadChunk ch = chunks[blockIdx.x];
  const T* p = static_cast<const T*>(ch.ptr);
  double s = 0;
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kThreads) {
    const double v = static_cast<double>(load(p[i]));
    s += v * v;
  }
  s = block_reduce_fast<kThreads>(s, SumOp{});
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// One thread per tensor: its chunks are consecutive in the table.
__global__ void sum_squares_combine_kernel(const int64_t* first_chunk, int64_t ntensors,
                                           const double* partial, double* out) {
  const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (t >= ntensors) return;
  double s = 0;
  for (int64_t k = first_chunk[t]; k < first_chunk[t + 1]; ++k) s += partial[k];
  out[t] = s;
}

template <class T>
struct SumSquares {
  static void run(const KernelCall& c) {
    const int64_t n = static_cast<int64_t>(c.inputs.size());
    const Device dev = c.outputs[0].device();
    cudaStream_t stream = stream_for(dev);
    std::vector<ReadChunk> chunks;
    std::vector<int64_t> first(static_cast<size_t>(n) + 1, 0);
    for (int64_t t = 0; t < n; ++t) {
      first[t] = static_cast<int64_t>(chunks.size());
      const int64_t len = c.inputs[t].numel();
      for (int64_t b = 0; b < len; b += kChunkElems)
        chunks.push_back(
            {c.inputs[t].data_ptr(), b, std::min(len, b + kChunkElems), static_cast<int32_t>(t)});
    }
    first[n] = static_cast<int64_t>(chunks.size());
    const int64_t nchunks = first[n];
    const int64_t table_bytes = nchunks * static_cast<int64_t>(sizeof(ReadChunk));
    const int64_t first_bytes = (n + 1) * 8;
    TensorBase buf =
        scratch(table_bytes + first_bytes + std::max<int64_t>(nchunks, 1) * 8 + 16, dev);
    char* base = static_cast<char*>(buf.data_ptr());
    auto* d_first = reinterpret_cast<int64_t*>(base);
    auto* d_partial = reinterpret_cast<double*>(base + first_bytes);
    auto* d_chunks =
        reinterpret_cast<ReadChunk*>(base + first_bytes + std::max<int64_t>(nchunks, 1) * 8);
    TS_CUDA_CHECK(
        cudaMemcpyAsync(d_first, first.data(), first_bytes, cudaMemcpyHostToDevice, stream));
    if (nchunks > 0) {
      TS_CUDA_CHECK(
          cudaMemcpyAsync(d_chunks, chunks.data(), table_bytes, cudaMemcpyHostToDevice, stream));
      sum_squares_chunks_kernel<T>
          <<<static_cast<unsigned>(nchunks), kThreads, 0, stream>>>(d_chunks, d_partial);
    }
    sum_squares_combine_kernel<<<grid_for(n), kThreads, 0, stream>>>(
        d_first, n, d_partial, static_cast<double*>(c.outputs[0].data_ptr()));
    TS_CUDA_LAUNCH_CHECK("sum_squares");
  }
};

const bool registered = [] {
  for (DType d : {DType::Float32, DType::Float64}) {
    const bool f = d == DType::Float32;
    register_kernel(Kernel::adamw_step, DeviceType::CUDA, d,
                    f ? &AdamW<float>::run : &AdamW<double>::run);
    register_kernel(Kernel::sgd_step, DeviceType::CUDA, d,
                    f ? &Sgd<float>::run : &Sgd<double>::run);
    register_kernel(Kernel::lamb_step, DeviceType::CUDA, d,
                    f ? &Lamb<float>::run : &Lamb<double>::run);
  }
  register_floating<SumSquares>(Kernel::sum_squares);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
