// copy (strided, casting), fill, arange and the Philox random fills.
#include <cstring>

#include "cpu_types.h"
#include "parallel.h"
#include "tessera/rng.h"

namespace tessera::cpu {
namespace {

template <class Dst, class Src>
inline Dst convert(const Src& s) {
  if constexpr (std::is_same_v<Dst, bool>) {
    return static_cast<float>(load(s)) != 0.0f;
  } else if constexpr (std::is_same_v<Dst, Half> || std::is_same_v<Dst, BFloat16>) {
    return Dst(static_cast<float>(load(s)));
  } else {
    return static_cast<Dst>(load(s));
  }
}

// inputs: src (any strides/dtype); outputs: dst (any strides, same shape). Casts as needed.
void copy_kernel(const KernelCall& c) {
  const TensorBase& src = c.inputs[0];
  TensorBase& dst = c.outputs[0];
  TS_CHECK(src.shape() == dst.shape(), "copy: shape mismatch ", shape_str(src.shape()), " vs ",
           shape_str(dst.shape()));
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    const size_t bytes = static_cast<size_t>(src.nbytes());
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
    if (d != s) {
      parallel_for(static_cast<int64_t>(bytes), 1 << 20, [&](int64_t b, int64_t e) {
        std::memcpy(d + b, s + b, static_cast<size_t>(e - b));
      });
    }
    return;
  }
  visit_dtype(src.dtype(), [&]<class S>() {
    visit_dtype(dst.dtype(), [&]<class D>() {
      const S* sp = src.data<S>();
      D* dp = dst.data<D>();
      for_each_row<2>(src.shape(), {&dst.strides(), &src.strides()},
                      [&](auto off, int64_t len, auto st, int64_t) {
                        D* o = dp + off[0];
                        const S* i = sp + off[1];
                        for (int64_t j = 0; j < len; ++j) o[j * st[0]] = convert<D>(i[j * st[1]]);
                      });
    });
  });
}

// outputs: dst (contiguous); attrs.scalar: value.
template <class T>
struct Fill {
  static void run(const KernelCall& c) {
    TensorBase& dst = c.outputs[0];
    const T v = convert<T>(c.attrs.scalar);
    T* p = dst.data<T>();
    parallel_for(dst.numel(), 1 << 16, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
  }
};

// outputs: dst (contiguous); attrs.scalar: start, attrs.scalar2: step.
template <class T>
struct Arange {
  static void run(const KernelCall& c) {
    T* p = c.outputs[0].data<T>();
    const int64_t n = c.outputs[0].numel();
    for (int64_t i = 0; i < n; ++i)
      p[i] = convert<T>(c.attrs.scalar + static_cast<double>(i) * c.attrs.scalar2);
  }
};

// outputs: dst (contiguous); attrs: seed, offset; scalar/scalar2: low/high or mean/std.
template <class T, bool kNormal>
struct RandomFill {
  static void run(const KernelCall& c) {
    T* p = c.outputs[0].data<T>();
    const double a = c.attrs.scalar, b = c.attrs.scalar2;
    const uint64_t seed = c.attrs.seed, base = c.attrs.offset;
    parallel_for(c.outputs[0].numel(), 1 << 14, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        const uint64_t idx = base + static_cast<uint64_t>(i);
        double r;
        if constexpr (std::is_same_v<T, double>) {
          r = kNormal ? philox_normal_f64(seed, idx) : philox_uniform_f64(seed, idx);
        } else {
          r = kNormal ? philox_normal(seed, idx) : philox_uniform(seed, idx);
        }
        p[i] = convert<T>(kNormal ? a + b * r : a + (b - a) * r);
      }
    });
  }
};
template <class T>
using Uniform = RandomFill<T, false>;
template <class T>
using Normal = RandomFill<T, true>;

const bool registered = [] {
  for (int d = 0; d < kNumDTypes; ++d)
    register_kernel(Kernel::copy, DeviceType::CPU, static_cast<DType>(d), &copy_kernel);
  register_all<Fill>(Kernel::fill);
  register_numeric<Arange>(Kernel::arange);
  register_floating<Uniform>(Kernel::uniform);
  register_floating<Normal>(Kernel::normal);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
