// softmax / log_softmax over the last dim of a contiguous [rows, C] input, and their
// backward passes from the saved output.
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_types.h"
#include "parallel.h"
#include "row_exp.h"

namespace tessera::cpu {
namespace {

template <class T, class RowFn>
void per_row(const KernelCall& c, RowFn fn) {
  const TensorBase& x = c.inputs[0];
  const int64_t C = x.shape().empty() ? 1 : x.shape().back();
  const int64_t rows = C == 0 ? 0 : x.numel() / C;
  parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(C, 1)),
               [&](int64_t b, int64_t e) {
                 std::vector<compute_t<T>> buf(2 * static_cast<size_t>(C));  // row, exps
                 for (int64_t r = b; r < e; ++r) fn(r, C, buf.data());
               });
}

template <class T, bool kLog>
struct Softmax {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const T* x = c.inputs[0].data<T>();
    T* y = c.outputs[0].data<T>();
    per_row<T>(c, [&](int64_t r, int64_t C, A* buf) {
      for (int64_t j = 0; j < C; ++j) buf[j] = A(load(x[r * C + j]));
      A m = row_max(buf, C);
      if (std::isinf(m) && m < 0) m = 0;  // an all -inf row: avoid inf - inf
      if constexpr (kLog) {
        const A lse = m + std::log(exp_shifted_row(buf, m, C, buf + C));
        for (int64_t j = 0; j < C; ++j) y[r * C + j] = T(buf[j] - lse);
      } else {
        const A inv = A(1) / exp_shifted_row(buf, m, C, buf);
        for (int64_t j = 0; j < C; ++j) y[r * C + j] = T(buf[j] * inv);
      }
    });
  }
};
template <class T>
using SoftmaxK = Softmax<T, false>;
template <class T>
using LogSoftmaxK = Softmax<T, true>;

// inputs: grad_y, y. softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
template <class T, bool kLog>
struct SoftmaxBackward {
  static void run(const KernelCall& c) {
    using A = compute_t<T>;
    const T* g = c.inputs[0].data<T>();
    const T* y = c.inputs[1].data<T>();
    T* dx = c.outputs[0].data<T>();
    per_row<T>(c, [&](int64_t r, int64_t C, A*) {
      const T* gr = g + r * C;
      const T* yr = y + r * C;
      A s = 0;
      for (int64_t j = 0; j < C; ++j) s += kLog ? A(load(gr[j])) : A(load(gr[j])) * A(load(yr[j]));
      for (int64_t j = 0; j < C; ++j) {
        const A gj = load(gr[j]), yj = load(yr[j]);
        dx[r * C + j] = T(kLog ? gj - std::exp(yj) * s : yj * (gj - s));
      }
    });
  }
};
template <class T>
using SoftmaxBackwardK = SoftmaxBackward<T, false>;
template <class T>
using LogSoftmaxBackwardK = SoftmaxBackward<T, true>;

const bool registered = [] {
  register_floating<SoftmaxK>(Kernel::softmax);
  register_floating<LogSoftmaxK>(Kernel::log_softmax);
  register_floating<SoftmaxBackwardK>(Kernel::softmax_backward);
  register_floating<LogSoftmaxBackwardK>(Kernel::log_softmax_backward);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
