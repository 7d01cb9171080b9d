// copy (any strides, any dtype pair, host<->device), fill, arange and the Philox random
// fills, which draw the same numbers as the CPU for the same (seed, offset).
#include "elementwise.cuh"
#include "pinned_allocator.h"
#include "tessera/philox.h"

namespace tessera::cuda {
namespace {

template <class D, class S, class I>
__global__ void strided_copy_kernel(D* dst, const S* src, I n, StridedIndexer<2, I> ix) {
  const I i = blockIdx.x * I(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  I off[2];
  ix.offsets(i, off);
  dst[off[0]] = convert<D>(src[off[1]]);
}

template <class D, class S>
struct CastFn {
  __device__ D operator()(int64_t, S x, S) const { return convert<D>(x); }
};

template <int kBytes>
struct Word;
template <>
struct Word<16> {
  using type = uint4;
};
template <>
struct Word<8> {
  using type = uint2;
};
template <>
struct Word<4> {
  using type = uint32_t;
};
template <>
struct Word<2> {
  using type = uint16_t;
};
template <>
struct Word<1> {
  using type = uint8_t;
};

template <class D, class S>
void launch_strided(D* dst, const S* src, Shape shape, std::array<Shape, 2> st,
                    cudaStream_t stream) {
  const int64_t n = numel_of(shape);
  if (fits_int32<2>(shape, {&st[0], &st[1]})) {
    const auto ix = make_indexer<2, int32_t>(shape, {&st[0], &st[1]});
    strided_copy_kernel<D, S, int32_t>
        <<<grid_for(n), kThreads, 0, stream>>>(dst, src, static_cast<int32_t>(n), ix);
  } else {
    const auto ix = make_indexer<2, int64_t>(shape, {&st[0], &st[1]});
    strided_copy_kernel<D, S, int64_t><<<grid_for(n), kThreads, 0, stream>>>(dst, src, n, ix);
  }
  TS_CUDA_LAUNCH_CHECK("copy");
}

// Same-dtype strided copy moved in the widest word (up to 16 bytes) that the innermost
// contiguous run, every other stride and both base pointers allow: a transpose of
// [B, T, H, 64] bf16 heads moves 16 bytes per thread instead of 2.
template <int kBytes>
bool try_wide_copy(void* dst, const void* src, Shape shape, std::array<Shape, 2> st, int64_t item,
                   cudaStream_t stream) {
  if (shape.empty() || kBytes < item || kBytes % item) return false;
  const int64_t per = kBytes / item;
  const size_t last = shape.size() - 1;
  if (st[0][last] != 1 || st[1][last] != 1 || shape[last] % per) return false;
  if (reinterpret_cast<uintptr_t>(dst) % kBytes || reinterpret_cast<uintptr_t>(src) % kBytes)
    return false;
  for (size_t d = 0; d < last; ++d)
    if (st[0][d] % per || st[1][d] % per) return false;
  shape[last] /= per;
  for (auto& s : st)
    for (size_t d = 0; d < last; ++d) s[d] /= per;
  using W = typename Word<kBytes>::type;
  launch_strided(static_cast<W*>(dst), static_cast<const W*>(src), shape, st, stream);
  return true;
}

// dst and src on the same CUDA device, same shape, any strides and dtypes.
void device_copy(const TensorBase& src, TensorBase& dst) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  cudaStream_t stream = stream_of(dst);
  const bool contiguous = src.is_contiguous() && dst.is_contiguous();
  if (src.dtype() == dst.dtype() && contiguous) {
    if (src.data_ptr() != dst.data_ptr())
      TS_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), dst.nbytes(),
                                    cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (contiguous) {  // a cast: vectorised elementwise map
    visit_dtype(src.dtype(), [&]<class S>() {
      visit_dtype(dst.dtype(), [&]<class D>() {
        launch_contiguous(static_cast<D*>(dst.data_ptr()), static_cast<const S*>(src.data_ptr()),
                          static_cast<const S*>(nullptr), n, CastFn<D, S>{}, stream);
      });
    });
    return;
  }
  Shape shape = dst.shape();
  std::array<Shape, 2> st{dst.strides(), src.strides()};
  coalesce(shape, st);
  if (src.dtype() == dst.dtype()) {
    const int64_t item = static_cast<int64_t>(itemsize(src.dtype()));
    if (try_wide_copy<16>(dst.data_ptr(), src.data_ptr(), shape, st, item, stream) ||
        try_wide_copy<8>(dst.data_ptr(), src.data_ptr(), shape, st, item, stream) ||
        try_wide_copy<4>(dst.data_ptr(), src.data_ptr(), shape, st, item, stream))
      return;
  }
  visit_dtype(src.dtype(), [&]<class S>() {
    visit_dtype(dst.dtype(), [&]<class D>() {
      launch_strided(static_cast<D*>(dst.data_ptr()), static_cast<const S*>(src.data_ptr()), shape,
                     st, stream);
    });
  });
}

// A contiguous host copy of `t` in `dtype` (t itself when it already is one).
TensorBase host_contiguous(const TensorBase& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  TensorBase h = TensorBase::empty(t.shape(), dtype, Device::cpu());
  const TensorBase ins[1] = {t};
  TensorBase outs[1] = {h};
  run_kernel(Kernel::copy, Device::cpu(), dtype, ins, outs);
  return h;
}

// inputs: src; outputs: dst (same shape). Either side may be on the host.
void copy_kernel(const KernelCall& c) {
  const TensorBase& src = c.inputs[0];
  TensorBase& dst = c.outputs[0];
  TS_CHECK(src.shape() == dst.shape(), "copy: shape mismatch ", shape_str(src.shape()), " vs ",
           shape_str(dst.shape()));
  if (dst.numel() == 0) return;
  if (src.device().is_cuda() && dst.device().is_cuda()) {
    if (src.device() == dst.device()) return device_copy(src, dst);
    // Across devices: a contiguous peer copy, then a strided/casting copy on the target.
    const TensorBase s = src.is_contiguous() ? src : src.contiguous();
    TensorBase staged = TensorBase::empty(dst.shape(), s.dtype(), dst.device());
    TS_CUDA_CHECK(cudaStreamSynchronize(stream_of(s)));
    TS_CUDA_CHECK(cudaMemcpyPeerAsync(staged.data_ptr(), dst.device().index, s.data_ptr(),
                                      s.device().index, s.nbytes(), stream_of(dst)));
    DeviceGuard on_target(dst.device().index);
    return device_copy(staged, dst);
  }
  if (dst.device().is_cuda()) {  // host -> device
    TensorBase target =
        dst.is_contiguous() ? dst : TensorBase::empty(dst.shape(), dst.dtype(), dst.device());
    if (src.is_pinned() && src.is_contiguous() && src.dtype() == dst.dtype()) {
      // The GPU reads pinned bytes after the call returns: the recorded event holds back
      // host writes to them and reuse of the block until it has.
      TS_CUDA_CHECK(cudaMemcpyAsync(target.data_ptr(), src.data_ptr(), src.nbytes(),
                                    cudaMemcpyHostToDevice, stream_of(dst)));
      record_pinned_copy(src, stream_of(dst));
    } else {
      const TensorBase h = host_contiguous(src, dst.dtype());
      // From pageable memory the call returns once the bytes are staged, so `h` may go.
      TS_CUDA_CHECK(cudaMemcpyAsync(target.data_ptr(), h.data_ptr(), h.nbytes(),
                                    cudaMemcpyHostToDevice, stream_of(dst)));
    }
    if (!dst.is_contiguous()) device_copy(target, dst);
    return;
  }
  // device -> host (into pinned memory at full bus speed; either way the host waits)
  if (dst.is_pinned()) dst.storage()->wait_for_copies();
  const TensorBase s = src.is_contiguous() ? src : src.contiguous();
  const bool direct = dst.is_contiguous() && dst.dtype() == s.dtype();
  TensorBase h = direct ? dst : TensorBase::empty(dst.shape(), s.dtype(), Device::cpu());
  TS_CUDA_CHECK(cudaMemcpyAsync(h.data_ptr(), s.data_ptr(), s.nbytes(), cudaMemcpyDeviceToHost,
                                stream_of(s)));
  TS_CUDA_CHECK(cudaStreamSynchronize(stream_of(s)));
  if (!direct) {
    const TensorBase ins[1] = {h};
    TensorBase outs[1] = {dst};
    run_kernel(Kernel::copy, Device::cpu(), dst.dtype(), ins, outs);
  }
}

template <class T>
__global__ void fill_kernel(T* p, int64_t n, T v) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = v;
}

// outputs: dst (contiguous); attrs.scalar: value.
template <class T>
struct Fill {
  static void run(const KernelCall& c) {
    TensorBase& dst = c.outputs[0];
    const int64_t n = dst.numel();
    if (n == 0) return;
    const T v = convert<T>(c.attrs.scalar);
    fill_kernel<T><<<std::min(grid_for(n), 65535u), kThreads, 0, stream_of(dst)>>>(
        static_cast<T*>(dst.data_ptr()), n, v);
    TS_CUDA_LAUNCH_CHECK("fill");
  }
};

template <class T>
__global__ void arange_kernel(T* p, int64_t n, double start, double step) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) p[i] = convert<T>(start + static_cast<double>(i) * step);
}

// outputs: dst (contiguous); attrs.scalar: start, attrs.scalar2: step.
template <class T>
struct Arange {
  static void run(const KernelCall& c) {
    TensorBase& dst = c.outputs[0];
    const int64_t n = dst.numel();
    if (n == 0) return;
    arange_kernel<T><<<grid_for(n), kThreads, 0, stream_of(dst)>>>(
        static_cast<T*>(dst.data_ptr()), n, c.attrs.scalar, c.attrs.scalar2);
    TS_CUDA_LAUNCH_CHECK("arange");
  }
};

template <class T, bool kNormal>
__global__ void random_kernel(T* p, int64_t n, uint64_t seed, uint64_t base, double a, double b) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  const uint64_t idx = base + static_cast<uint64_t>(i);
  double r;
  if constexpr (std::is_same_v<T, double>) {
    r = kNormal ? philox::normal_f64(seed, idx) : philox::uniform_f64(seed, idx);
  } else {
    r = kNormal ? static_cast<double>(static_cast<float>(philox::normal_f64(seed, idx)))
                : static_cast<double>(philox::uniform(seed, idx));
  }
  p[i] = convert<T>(kNormal ? a + b * r : a + (b - a) * r);
}

// outputs: dst (contiguous); attrs: seed, offset; scalar/scalar2: low/high or mean/std.
template <class T, bool kNormal>
struct RandomFill {
  static void run(const KernelCall& c) {
    TensorBase& dst = c.outputs[0];
    const int64_t n = dst.numel();
    if (n == 0) return;
    random_kernel<T, kNormal><<<grid_for(n), kThreads, 0, stream_of(dst)>>>(
        static_cast<T*>(dst.data_ptr()), n, c.attrs.seed, c.attrs.offset, c.attrs.scalar,
        c.attrs.scalar2);
    TS_CUDA_LAUNCH_CHECK("random");
  }
};
template <class T>
using Uniform = RandomFill<T, false>;
template <class T>
using Normal = RandomFill<T, true>;

const bool registered = [] {
  for (int d = 0; d < kNumDTypes; ++d)
    register_kernel(Kernel::copy, DeviceType::CUDA, static_cast<DType>(d), &copy_kernel);
  register_all<Fill>(Kernel::fill);
  register_numeric<Arange>(Kernel::arange);
  register_floating<Uniform>(Kernel::uniform);
  register_floating<Normal>(Kernel::normal);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
