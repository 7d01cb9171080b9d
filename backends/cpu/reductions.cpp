// Row reductions: the op layer presents the input as a contiguous [outer, R] matrix (reduced
// dims moved last) and the output as [outer]. Rows longer than kChunk are split into fixed
// chunks whose partial results combine in order, so results never depend on thread count.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_types.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

constexpr int64_t kChunk = 32768;

// Sums accumulate in double for every floating type (float32 sums of 10^6 elements would
// otherwise drift by ~1e-5 relative), and in int64 for integers.
template <class T>
using acc_t = std::conditional_t<std::is_integral_v<T>, int64_t, double>;

// Reduces each row with chunk(ptr, len) -> P and combine(P, P) -> P; finish(P) -> output.
template <class T, class P, class Chunk, class Combine, class Finish>
void reduce_rows(const KernelCall& c, Chunk chunk, Combine combine, Finish finish) {
  const TensorBase& x = c.inputs[0];
  const int64_t outer = x.shape()[0], R = x.shape()[1];
  const T* p = x.data<T>();
  const int64_t nchunks = std::max<int64_t>(1, (R + kChunk - 1) / kChunk);
  std::vector<P> partial(static_cast<size_t>(outer * nchunks));
  parallel_for(outer * nchunks, std::max<int64_t>(1, kChunk / std::max<int64_t>(R, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t i = b; i < e; ++i) {
                   const int64_t row = i / nchunks, k = i % nchunks;
                   const int64_t s = k * kChunk, len = std::min(kChunk, R - s);
                   partial[i] = chunk(p + row * R + s, len, s);
                 }
               });
  for (int64_t row = 0; row < outer; ++row) {
    P acc = partial[row * nchunks];
    for (int64_t k = 1; k < nchunks; ++k) acc = combine(acc, partial[row * nchunks + k]);
    finish(row, acc);
  }
}

template <class T>
acc_t<T> chunk_sum(const T* p, int64_t len) {
  using A = acc_t<T>;
  if constexpr (std::is_floating_point_v<T>) {
    return Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p, len).template cast<A>().sum();
  } else {
    A s = 0;
    for (int64_t i = 0; i < len; ++i) s += static_cast<A>(load(p[i]));
    return s;
  }
}

template <class T>
struct Sum {
  static void run(const KernelCall& c) {
    using A = acc_t<T>;
    TensorBase& out = c.outputs[0];
    visit_dtype(out.dtype(), [&]<class O>() {
      O* y = out.data<O>();
      reduce_rows<T, A>(
          c, [](const T* p, int64_t len, int64_t) { return chunk_sum(p, len); },
          [](A a, A b) { return a + b; },
          [&](int64_t row, A v) { y[row] = static_cast<O>(static_cast<compute_t<O>>(v)); });
    });
  }
};

// attrs.flag: true = max, false = min. NaN propagates, as in torch.
template <class T, bool kMax>
struct Extreme {
  static void run(const KernelCall& c) {
    using C = compute_t<T>;
    T* y = c.outputs[0].data<T>();
    TS_CHECK(c.inputs[0].shape()[1] > 0, kMax ? "max" : "min",
             ": cannot reduce over an empty dimension");
    auto better = [](C a, C b) {
      if constexpr (std::is_floating_point_v<C>)
        if (std::isnan(b)) return true;
      return kMax ? b > a : b < a;
    };
    reduce_rows<T, C>(
        c,
        [&](const T* p, int64_t len, int64_t) {
          C m = load(p[0]);
          for (int64_t i = 1; i < len; ++i)
            if (better(m, load(p[i]))) m = load(p[i]);
          return m;
        },
        [&](C a, C b) { return better(a, b) ? b : a; }, [&](int64_t row, C v) { y[row] = T(v); });
  }
};
template <class T>
using Max = Extreme<T, true>;
template <class T>
using Min = Extreme<T, false>;

template <class T>
struct Argmax {
  static void run(const KernelCall& c) {
    using C = compute_t<T>;
    using P = std::pair<C, int64_t>;
    int64_t* y = c.outputs[0].data<int64_t>();
    TS_CHECK(c.inputs[0].shape()[1] > 0, "argmax: cannot reduce over an empty dimension");
    auto better = [](C a, C b) {
      if constexpr (std::is_floating_point_v<C>) {
        if (std::isnan(a)) return false;
        if (std::isnan(b)) return true;
      }
      return b > a;
    };
    reduce_rows<T, P>(
        c,
        [&](const T* p, int64_t len, int64_t start) {
          P m{load(p[0]), start};
          for (int64_t i = 1; i < len; ++i)
            if (better(m.first, load(p[i]))) m = {load(p[i]), start + i};
          return m;
        },
        [&](P a, P b) { return better(a.first, b.first) ? b : a; },
        [&](int64_t row, P v) { y[row] = v.second; });
  }
};

// attrs.index: Bessel correction; attrs.flag: false = variance, true = L2 norm.
template <class T, bool kNorm>
struct SquareSum {
  static void run(const KernelCall& c) {
    using C = double;
    const int64_t R = c.inputs[0].shape()[1];
    T* y = c.outputs[0].data<T>();
    std::vector<C> mean(static_cast<size_t>(c.inputs[0].shape()[0]), C(0));
    if (!kNorm) {
      reduce_rows<T, C>(
          c, [](const T* p, int64_t len, int64_t) { return static_cast<C>(chunk_sum(p, len)); },
          [](C a, C b) { return a + b; }, [&](int64_t row, C v) { mean[row] = v / C(R); });
    }
    const T* base = c.inputs[0].data<T>();
    reduce_rows<T, C>(
        c,
        [&](const T* p, int64_t len, int64_t) {
          const C m = mean[(p - base) / std::max<int64_t>(R, 1)];
          C s = 0;
          for (int64_t i = 0; i < len; ++i) {
            const C d = static_cast<C>(load(p[i])) - m;
            s += d * d;
          }
          return s;
        },
        [](C a, C b) { return a + b; },
        [&](int64_t row, C v) {
          if constexpr (kNorm) {
            y[row] = T(static_cast<compute_t<T>>(std::sqrt(v)));
          } else {
            const C denom = C(R - c.attrs.index);
            y[row] = T(static_cast<compute_t<T>>(denom > 0 ? v / denom
                                                           : std::numeric_limits<C>::quiet_NaN()));
          }
        });
  }
};
template <class T>
using Var = SquareSum<T, false>;
template <class T>
using Norm = SquareSum<T, true>;

const bool registered = [] {
  register_all<Sum>(Kernel::sum);
  register_numeric<Max>(Kernel::max);
  register_numeric<Min>(Kernel::min);
  register_numeric<Argmax>(Kernel::argmax);
  register_floating<Var>(Kernel::var);
  register_floating<Norm>(Kernel::norm);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
