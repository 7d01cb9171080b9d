// Binary elementwise kernels, comparisons and where. Inputs arrive broadcast to the output
// shape (stride 0 on broadcast dims) with one dtype; the output is contiguous.
#include "elementwise.cuh"

namespace tessera::cuda {
namespace {

#define TS_CUDA_BINARY(Name, expr)       \
  struct Name {                          \
    template <class C>                   \
    __device__ static auto f(C a, C b) { \
      return expr;                       \
    }                                    \
  };
TS_CUDA_BINARY(Add, a + b)
TS_CUDA_BINARY(Sub, a - b)
TS_CUDA_BINARY(Mul, a* b)
TS_CUDA_BINARY(Div, a / b)
TS_CUDA_BINARY(Pow, pow(a, b))
TS_CUDA_BINARY(Eq, a == b)
TS_CUDA_BINARY(Ne, a != b)
TS_CUDA_BINARY(Lt, a < b)
TS_CUDA_BINARY(Le, a <= b)
TS_CUDA_BINARY(Gt, a > b)
TS_CUDA_BINARY(Ge, a >= b)
#undef TS_CUDA_BINARY

template <class T, class Out, class Op>
struct BinaryFn {
  __device__ Out operator()(int64_t, T a, T b) const {
    if constexpr (std::is_same_v<T, bool>)
      return static_cast<Out>(Op::f(int(a), int(b)));
    else
      return convert<Out>(Op::f(load(a), load(b)));
  }
};

template <class Out, class T, class F>
__global__ void binary_strided(Out* y, const T* a, const T* b, int64_t n, StridedIndexer<2> ix,
                               F f) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  int64_t off[2];
  ix.offsets(i, off);
  y[i] = f(i, a[off[0]], b[off[1]]);
}

template <class Op, class T, class Out>
void binary(const KernelCall& c) {
  const TensorBase &a = c.inputs[0], &b = c.inputs[1];
  TensorBase& y = c.outputs[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const T* pa = static_cast<const T*>(a.data_ptr());
  const T* pb = static_cast<const T*>(b.data_ptr());
  Out* py = static_cast<Out*>(y.data_ptr());
  if (a.is_contiguous() && b.is_contiguous())
    return launch_contiguous(py, pa, pb, n, BinaryFn<T, Out, Op>{}, stream_of(y));
  Shape shape = y.shape();
  std::array<Shape, 2> st{a.strides(), b.strides()};
  coalesce(shape, st);
  const auto ix = make_indexer<2>(shape, {&st[0], &st[1]});
  binary_strided<<<grid_for(n), kThreads, 0, stream_of(y)>>>(py, pa, pb, n, ix,
                                                             BinaryFn<T, Out, Op>{});
  TS_CUDA_LAUNCH_CHECK("binary");
}

template <class Op>
struct Arith {
  template <class T>
  struct K {
    static void run(const KernelCall& c) { binary<Op, T, T>(c); }
  };
};
template <class Op>
struct Compare {
  template <class T>
  struct K {
    static void run(const KernelCall& c) { binary<Op, T, bool>(c); }
  };
};

template <class T>
__global__ void where_kernel(T* y, const bool* m, const T* a, const T* b, int64_t n,
                             StridedIndexer<3> ix) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n) return;
  int64_t off[3];
  ix.offsets(i, off);
  y[i] = m[off[0]] ? a[off[1]] : b[off[2]];
}

// inputs: cond (bool), a, b; all broadcast views of the output shape.
template <class T>
struct Where {
  static void run(const KernelCall& c) {
    TensorBase& y = c.outputs[0];
    const int64_t n = y.numel();
    if (n == 0) return;
    Shape shape = y.shape();
    std::array<Shape, 3> st{c.inputs[0].strides(), c.inputs[1].strides(), c.inputs[2].strides()};
    coalesce(shape, st);
    const auto ix = make_indexer<3>(shape, {&st[0], &st[1], &st[2]});
    where_kernel<T><<<grid_for(n), kThreads, 0, stream_of(y)>>>(
        static_cast<T*>(y.data_ptr()), static_cast<const bool*>(c.inputs[0].data_ptr()),
        static_cast<const T*>(c.inputs[1].data_ptr()),
        static_cast<const T*>(c.inputs[2].data_ptr()), n, ix);
    TS_CUDA_LAUNCH_CHECK("where");
  }
};

const bool registered = [] {
  register_numeric<Arith<Add>::K>(Kernel::add);
  register_numeric<Arith<Sub>::K>(Kernel::sub);
  register_numeric<Arith<Mul>::K>(Kernel::mul);
  register_floating<Arith<Div>::K>(Kernel::div);
  register_floating<Arith<Pow>::K>(Kernel::pow);
  register_all<Compare<Eq>::K>(Kernel::eq);
  register_all<Compare<Ne>::K>(Kernel::ne);
  register_numeric<Compare<Lt>::K>(Kernel::lt);
  register_numeric<Compare<Le>::K>(Kernel::le);
  register_numeric<Compare<Gt>::K>(Kernel::gt);
  register_numeric<Compare<Ge>::K>(Kernel::ge);
  register_all<Where>(Kernel::where);
  register_kernel(Kernel::add, DeviceType::CUDA, DType::Bool, &Arith<Add>::K<bool>::run);
  register_kernel(Kernel::mul, DeviceType::CUDA, DType::Bool, &Arith<Mul>::K<bool>::run);
  return true;
}();

}  // namespace
}  // namespace tessera::cuda
