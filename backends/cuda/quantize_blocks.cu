// quantize_blocks / dequantize_blocks on the GPU: the CPU kernels' contract
// (backends/cpu/quantize_blocks.cpp) and layout (tessera/quantized_blocks.h), one thread block
// per quantization block; the block's max |x| is a fixed-order block reduction, so the codes
// equal the CPU's.
#include "kernel_util.cuh"
#include "tessera/quantized_blocks.h"

namespace tessera::cuda {
namespace {

namespace qb = quantized_blocks;

struct Layout {
  int64_t n, block, nb, words, code_words, used_bytes;
  int bits;
};

Layout layout_of(const KernelCall& c, int64_t numel) {
  Layout l;
  l.n = numel / c.attrs.dims[0];
  l.block = c.attrs.index;
  l.bits = static_cast<int>(c.attrs.dims[1]);
  l.nb = qb::blocks(l.n, l.block);
  l.words = qb::words(l.n, l.block, l.bits);
  l.code_words = qb::code_words(l.n, l.bits);
  l.used_bytes = qb::code_bytes(l.n, l.bits);
  return l;
}

// max that keeps a NaN (so a NaN block comes back NaN, as on the CPU).
struct MaxKeepNaN {
  template <class A>
  __device__ A operator()(A a, A b) const {
    return a != a || a > b ? a : b;
  }
};

template <class T>
__global__ void quantize_kernel(const T* x, int32_t* packed, Layout l) {
  using A = compute_t<T>;
  const int64_t s = blockIdx.x / l.nb, k = blockIdx.x % l.nb;
  const int64_t first = k * l.block, len = l.n - first < l.block ? l.n - first : l.block;
  const T* v = x + s * l.n + first;
  uint8_t* codes = reinterpret_cast<uint8_t*>(packed + s * l.words);
  A m = 0;
  for (int64_t i = threadIdx.x; i < len; i += kThreads) m = MaxKeepNaN{}(A(fabs(load(v[i]))), m);
  m = block_reduce<kThreads>(m, MaxKeepNaN{});
  const A range = A((1 << (l.bits - 1)) - 1);
  // codes = (x * range) / max, rounded once as on the CPU.
  A divisor = 1, numerator = range;
  float stored = 1;
  if (!isfinite(m)) {
    numerator = 0;
    stored = __int_as_float(0x7fc00000);
  } else if (m != A(0)) {
    divisor = m;
    stored = static_cast<float>(m / range);
  } else {
    numerator = 0;
  }
  if (threadIdx.x == 0) {
    reinterpret_cast<float*>(packed + s * l.words + l.code_words)[k] = stored;
    if (k == l.nb - 1)  // the padding after the codes travels too
      for (int64_t b = l.used_bytes; b < 4 * l.code_words; ++b) codes[b] = 0;
  }
  auto code_of = [&](A value) {
    const A q = rint(value * numerator / divisor);  // ties to even
    return q == q ? static_cast<int>(q < -range ? -range : (q > range ? range : q)) : 0;
  };
  if (l.bits == 8) {
    for (int64_t i = threadIdx.x; i < len; i += kThreads)
      codes[first + i] = static_cast<uint8_t>(code_of(load(v[i])));
  } else {
    for (int64_t p = threadIdx.x; 2 * p < len; p += kThreads) {
      const int lo = code_of(load(v[2 * p]));
      const int hi = 2 * p + 1 < len ? code_of(load(v[2 * p + 1])) : 0;
      codes[first / 2 + p] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
    }
  }
}

template <class T>
__global__ void dequantize_kernel(const int32_t* packed, T* y, Layout l) {
  using A = compute_t<T>;
  const int64_t s = blockIdx.x / l.nb, k = blockIdx.x % l.nb;
  const int64_t first = k * l.block, len = l.n - first < l.block ? l.n - first : l.block;
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(packed + s * l.words);
  const A scale = A(reinterpret_cast<const float*>(packed + s * l.words + l.code_words)[k]);
  T* out = y + s * l.n + first;
  for (int64_t i = threadIdx.x; i < len; i += kThreads)
    out[i] = convert<T>(A(qb::code_at(codes, first + i, l.bits)) * scale);
}

template <class T>
struct QuantizeBlocks {
  static void run(const KernelCall& c) {
    const Layout l = layout_of(c, c.inputs[0].numel());
    const int64_t grid = c.attrs.dims[0] * l.nb;
    if (grid == 0) return;
    TS_CHECK(grid <= 0x7fffffff, "quantize_blocks: ", grid, " blocks exceed one launch");
    quantize_kernel<T><<<static_cast<unsigned>(grid), kThreads, 0, stream_of(c.outputs[0])>>>(
        static_cast<const T*>(c.inputs[0].data_ptr()), c.outputs[0].data<int32_t>(), l);
    TS_CUDA_LAUNCH_CHECK("quantize_blocks");
  }
};

template <class T>
struct DequantizeBlocks {
  static void run(const KernelCall& c) {
    const Layout l = layout_of(c, c.outputs[0].numel());
    const int64_t grid = c.attrs.dims[0] * l.nb;
    if (grid == 0) return;
    TS_CHECK(grid <= 0x7fffffff, "dequantize_blocks: ", grid, " blocks exceed one launch");
    dequantize_kernel<T><<<static_cast<unsigned>(grid), kThreads, 0, stream_of(c.outputs[0])>>>(
        c.inputs[0].data<int32_t>(), static_cast<T*>(c.outputs[0].data_ptr()), l);
    TS_CUDA_LAUNCH_CHECK("dequantize_blocks");
  }
};

const bool registered = [] {
  register_floating<QuantizeBlocks>(Kernel::quantize_blocks);
  register_floating<DequantizeBlocks>(Kernel::dequantize_blocks);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
