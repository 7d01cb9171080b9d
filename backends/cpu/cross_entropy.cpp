// Cross-entropy fused with log-softmax over contiguous logits [N, C] and int64 targets [N].
// forward  outputs: loss [N] (0 where ignored), lse [N] (both in the compute type)
//          attrs.index = ignore_index, attrs.scalar = label smoothing
// backward inputs: logits, targets, lse, scale [N] (dloss per row, compute type)
//          outputs: dlogits [N, C]
#include <cmath>
#include <limits>

#include "cpu_types.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

void check_target(int64_t t, int64_t row, int64_t C, int64_t ignore) {
  TS_CHECK(t == ignore || (t >= 0 && t < C), "cross_entropy: target ", t, " at position ", row,
           " is out of range for ", C, " classes (ignore_index is ", ignore, ")");
}

template <class T>
struct CrossEntropy {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const int64_t N = c.inputs[0].shape()[0], C = c.inputs[0].shape()[1];
    const T* x = c.inputs[0].data<T>();
    const int64_t* tgt = c.inputs[1].data<int64_t>();
    A* loss = c.outputs[0].data<A>();
    A* lse_out = c.outputs[1].data<A>();
    const int64_t ignore = c.attrs.index;
    const A eps = static_cast<A>(c.attrs.scalar);
    for (int64_t r = 0; r < N; ++r) check_target(tgt[r], r, C, ignore);
    parallel_for(N, std::max<int64_t>(1, 8192 / std::max<int64_t>(C, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     const T* xr = x + r * C;
                     A m = -std::numeric_limits<A>::infinity(), sum_x = 0;
                     for (int64_t j = 0; j < C; ++j) {
                       m = std::max(m, A(load(xr[j])));
                       sum_x += A(load(xr[j]));
                     }
                     A s = 0;
                     for (int64_t j = 0; j < C; ++j) s += std::exp(A(load(xr[j])) - m);
                     const A lse = m + std::log(s);
                     lse_out[r] = lse;
                     if (tgt[r] == ignore) {
                       loss[r] = 0;
                       continue;
                     }
                     const A nll = lse - A(load(xr[tgt[r]]));
                     loss[r] = eps == A(0) ? nll : (A(1) - eps) * nll + eps * (lse - sum_x / A(C));
                   }
                 });
  }
};

template <class T>
struct CrossEntropyBackward {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const int64_t N = c.inputs[0].shape()[0], C = c.inputs[0].shape()[1];
    const T* x = c.inputs[0].data<T>();
    const int64_t* tgt = c.inputs[1].data<int64_t>();
    const A* lse = c.inputs[2].data<A>();
    const A* scale = c.inputs[3].data<A>();
    T* dx = c.outputs[0].data<T>();
    const int64_t ignore = c.attrs.index;
    const A eps = static_cast<A>(c.attrs.scalar);
    parallel_for(N, std::max<int64_t>(1, 8192 / std::max<int64_t>(C, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     T* dr = dx + r * C;
                     if (tgt[r] == ignore) {
                       for (int64_t j = 0; j < C; ++j) dr[j] = T(0);
                       continue;
                     }
                     const T* xr = x + r * C;
                     const A sc = scale[r], uniform = eps / A(C);
                     for (int64_t j = 0; j < C; ++j) {
                       const A p = std::exp(A(load(xr[j])) - lse[r]);
                       const A target = (j == tgt[r] ? A(1) - eps : A(0)) + uniform;
                       dr[j] = T(sc * (p - target));
                     }
                   }
                 });
  }
};

const bool registered = [] {
  register_floating<CrossEntropy>(Kernel::cross_entropy);
  register_floating<CrossEntropyBackward>(Kernel::cross_entropy_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
