// Batched GEMM. Operands are [batch, rows, cols] views with any strides; a view whose last
// two dims are swapped (a transpose) is handed to BLAS as a transposed operand, not copied.
// Large products go to OpenBLAS (which threads itself); many small ones run one per thread
// through Eigen's GEMM, which would otherwise be starved by BLAS's per-call overhead.
#include <cblas.h>

#include <vector>

#include "backends/cpu/cpu_types.h"
#include "backends/cpu/parallel.h"

namespace tessera::cpu {
namespace {

struct MatrixView {
  int64_t rows, cols, ld, batch_stride;
  bool transposed;  // element (r, c) at c * ld + r
};

// Describes one operand for BLAS, or returns false when it needs a contiguous copy first.
bool describe(const Tensor& t, MatrixView& v) {
  const auto& sh = t.shape();
  const auto& st = t.strides();
  const bool unit_cols = st[2] == 1 || sh[2] == 1, unit_rows = st[1] == 1 || sh[1] == 1;
  v = {sh[1], sh[2], 0, st[0], false};
  if (unit_cols && (sh[1] == 1 || st[1] >= std::max<int64_t>(1, sh[2]))) {
    v.ld = sh[1] == 1 ? std::max<int64_t>(sh[2], 1) : st[1];
    return true;
  }
  if (unit_rows && (sh[2] == 1 || st[2] >= std::max<int64_t>(1, sh[1]))) {
    v.ld = sh[2] == 1 ? std::max<int64_t>(sh[1], 1) : st[2];
    v.transposed = true;
    return true;
  }
  return false;
}

template <class T>
void gemm_blas(const T* a, const MatrixView& va, const T* b, const MatrixView& vb, T* c, int64_t M,
               int64_t N, int64_t K) {
  const auto ta = va.transposed ? CblasTrans : CblasNoTrans;
  const auto tb = vb.transposed ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, va.ld, b, vb.ld, 0.0f, c, N);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a, va.ld, b, vb.ld, 0.0, c, N);
  }
}

template <class T>
void gemm_eigen(const T* a, const MatrixView& va, const T* b, const MatrixView& vb, T* c, int64_t M,
                int64_t N, int64_t K) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  Eigen::Map<Mat> C(c, M, N);
  auto mapA = [&](auto&& fn) {
    if (va.transposed)
      fn(Eigen::Map<const Mat, 0, Stride>(a, K, M, Stride(va.ld)).transpose());
    else
      fn(Eigen::Map<const Mat, 0, Stride>(a, M, K, Stride(va.ld)));
  };
  mapA([&](const auto& A) {
    if (vb.transposed)
      C.noalias() = A * Eigen::Map<const Mat, 0, Stride>(b, N, K, Stride(vb.ld)).transpose();
    else
      C.noalias() = A * Eigen::Map<const Mat, 0, Stride>(b, K, N, Stride(vb.ld));
  });
}

// Computes in float/double; 16-bit operands are widened into contiguous scratch first.
template <class T>
struct Matmul {
  static void run(const KernelCall& c) {
    using C = compute_t<T>;
    Tensor a = c.inputs[0], b = c.inputs[1];
    Tensor& out = c.outputs[0];
    const int64_t batch = out.shape()[0], M = out.shape()[1], N = out.shape()[2];
    const int64_t K = a.shape()[2];
    if (M * N == 0) return;
    C* y;
    std::vector<C> wide_out;
    if constexpr (std::is_same_v<T, C>) {
      y = out.data<C>();
    } else {
      wide_out.resize(static_cast<size_t>(batch * M * N));
      y = wide_out.data();
    }
    if (K == 0) {
      std::fill(y, y + batch * M * N, C(0));
    } else {
      std::vector<C> wide_a, wide_b;
      MatrixView va, vb;
      const C* pa = operand<C>(a, va, wide_a);
      const C* pb = operand<C>(b, vb, wide_b);
      const bool small = 2.0 * M * N * K < 2.0 * 96 * 96 * 96;
      if (batch > 1 && small) {
        parallel_for(batch, 1, [&](int64_t s, int64_t e) {
          for (int64_t i = s; i < e; ++i)
            gemm_eigen(pa + i * va.batch_stride, va, pb + i * vb.batch_stride, vb, y + i * M * N, M,
                       N, K);
        });
      } else {
        for (int64_t i = 0; i < batch; ++i)
          gemm_blas(pa + i * va.batch_stride, va, pb + i * vb.batch_stride, vb, y + i * M * N, M, N,
                    K);
      }
    }
    if constexpr (!std::is_same_v<T, C>) {
      T* o = out.data<T>();
      for (size_t i = 0; i < wide_out.size(); ++i) o[i] = T(wide_out[i]);
    }
  }

  // Pointer to the operand as C, widening/copying into `scratch` when needed.
  template <class Cc>
  static const Cc* operand(const Tensor& t, MatrixView& v, std::vector<Cc>& scratch) {
    if constexpr (std::is_same_v<T, Cc>) {
      if (describe(t, v)) return t.data<Cc>();
    }
    const auto& sh = t.shape();
    const auto& st = t.strides();
    scratch.resize(static_cast<size_t>(sh[0] * sh[1] * sh[2]));
    const T* p = t.data<T>();
    size_t k = 0;
    for (int64_t i = 0; i < sh[0]; ++i)
      for (int64_t r = 0; r < sh[1]; ++r)
        for (int64_t q = 0; q < sh[2]; ++q)
          scratch[k++] = load(p[i * st[0] + r * st[1] + q * st[2]]);
    v = {sh[1], sh[2], std::max<int64_t>(sh[2], 1), sh[1] * sh[2], false};
    return scratch.data();
  }
};

const bool registered = [] {
  register_floating<Matmul>(Kernel::matmul);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
