// Cross-entropy fused with log-softmax over contiguous logits [N, C] and int64 targets [N].
// forward  outputs: loss [N] (0 where ignored), lse [N] (both in the compute type)
//          attrs.index = ignore_index, attrs.scalar = label smoothing
// backward inputs: logits, targets, lse, scale [N] (dloss per row, compute type)
//          outputs: dlogits [N, C]
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_types.h"
#include "lane_sum.h"
#include "parallel.h"
#include "row_exp.h"

namespace tessera::cpu {
namespace {

void check_target(int64_t t, int64_t row, int64_t C, int64_t ignore) {
  TS_CHECK(t == ignore || (t >= 0 && t < C), "cross_entropy: target ", t, " at position ", row,
           " is out of range for ", C, " classes (ignore_index is ", ignore, ")");
}

// Row r of the logits in the compute type: the tensor's own memory when it is that type,
// else converted into buf.
template <class T, class A = compute_t<T>>
const A* row_in_compute_type(const T* x, int64_t r, int64_t C, std::vector<A>& buf) {
  if constexpr (std::is_same_v<T, A>) {
    return x + r * C;
  } else {
    for (int64_t j = 0; j < C; ++j) buf[static_cast<size_t>(j)] = A(load(x[r * C + j]));
    return buf.data();
  }
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
                   std::vector<A> in(static_cast<size_t>(C)), ex(static_cast<size_t>(C));
                   for (int64_t r = b; r < e; ++r) {
                     const A* xr = row_in_compute_type(x, r, C, in);
                     const A m = row_max(xr, C);
                     const A lse = m + std::log(exp_shifted_row(xr, m, C, ex.data()));
                     lse_out[r] = lse;
                     if (tgt[r] == ignore) {
                       loss[r] = 0;
                       continue;
                     }
                     const A nll = lse - xr[tgt[r]];
                     if (eps == A(0)) {
                       loss[r] = nll;
                       continue;
                     }
                     const A sum_x = lane_sum<A>(C, [xr](int64_t j) { return xr[j]; });
                     loss[r] = (A(1) - eps) * nll + eps * (lse - sum_x / A(C));
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
                   std::vector<A> in(static_cast<size_t>(C)), p(static_cast<size_t>(C));
                   for (int64_t r = b; r < e; ++r) {
                     T* dr = dx + r * C;
                     if (tgt[r] == ignore) {
                       for (int64_t j = 0; j < C; ++j) dr[j] = T(0);
                       continue;
                     }
                     // d loss / d x_j = scale (p_j - target_j), target = (1 - eps) one-hot +
                     // eps / C.
                     exp_shifted_row(row_in_compute_type(x, r, C, in), lse[r], C, p.data());
                     const A sc = scale[r], uniform = eps / A(C);
                     for (int64_t j = 0; j < C; ++j) dr[j] = T(sc * (p[j] - uniform));
                     dr[tgt[r]] = T(sc * (p[tgt[r]] - ((A(1) - eps) + uniform)));
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
