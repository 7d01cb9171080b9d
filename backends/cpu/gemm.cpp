// Batched GEMM. Operands are [batch, rows, cols] views with any strides; a view whose last
// two dims are swapped (a transpose) is handed to BLAS as a transposed operand, not copied.
// All threading is OpenMP's: OpenBLAS runs single-threaded (its own pthread pool would fight
// the OpenMP workers for the cores: measured 195 ms vs 48 ms per tiny-GPT step on 2 cores),
// and a large product is cut into row (or column) panels, one sgemm call each, the cut
// decided by the shape alone so that the bits do not depend on the thread count.
// Many small products in a batch run one per thread through Eigen's GEMM.
// Optional fused work (the contract the CUDA backend meets with cuBLASLt epilogues):
// inputs[2], a bias [N], is added to every row of C before C is rounded to its dtype;
// outputs[1], [M] (batch 1), receives the sums over k of op(A)'s rows (a linear layer's bias
// gradient comes out of its weight-gradient product this way).
#include <cblas.h>

#include <vector>

#include "cpu_types.h"
#include "parallel.h"

namespace tessera::cpu {
namespace {

struct MatrixView {
  int64_t rows, cols, ld, batch_stride;
  bool transposed;  // element (r, c) at c * ld + r
};

// Describes one operand for BLAS, or returns false when it needs a contiguous copy first.
bool describe(const TensorBase& t, MatrixView& v) {
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
               int64_t N, int64_t K, int64_t ldc = -1) {
  const auto ta = va.transposed ? CblasTrans : CblasNoTrans;
  const auto tb = vb.transposed ? CblasTrans : CblasNoTrans;
  if (ldc < 0) ldc = N;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, a, va.ld, b, vb.ld, 0.0f, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, a, va.ld, b, vb.ld, 0.0, c, ldc);
  }
}

// How many panels a product is cut into, from its shape alone: OpenBLAS's bits for a row
// depend on the size of the call it is computed in, so the cut must not depend on the thread
// count (or OMP_NUM_THREADS would change results). A power of two up to 16, panels of at least
// 128 rows (re-packing the shared operand per panel costs ~3% of a tiny-preset step), but two
// of 64 rather than one: a weight gradient such as [128, 128] over 768 tokens ran on one core
// at half the rate of two panels (68 against 134 GFLOP/s on 2 cores).
int64_t panel_count(int64_t dim, double flops) {
  if (flops < 4e6) return 1;
  int64_t p = 1;
  while (p < 16 && dim / (2 * p) >= 128) p *= 2;
  if (p == 1 && dim >= 128) p = 2;
  return p;
}

// C = op(A) op(B) cut into panels of C's rows (or columns), spread over the OpenMP threads.
template <class T>
void gemm_parallel(const T* a, const MatrixView& va, const T* b, const MatrixView& vb, T* c,
                   int64_t M, int64_t N, int64_t K) {
  const bool split_rows = M >= N;
  const int64_t dim = split_rows ? M : N;
  const int64_t panels = panel_count(dim, 2.0 * M * N * K);
  const int64_t chunk = ((dim + panels - 1) / panels + 7) / 8 * 8;
  const int64_t pieces = (dim + chunk - 1) / chunk;
  const int64_t threads = omp_in_parallel() ? 1 : std::min<int64_t>(omp_get_max_threads(), pieces);
#pragma omp parallel for num_threads(static_cast <int>(threads)) schedule(static, 1)
  for (int64_t p = 0; p < pieces; ++p) {
    const int64_t s = p * chunk, len = std::min(chunk, dim - s);
    if (split_rows) {
      // Rows s.. of op(A): row-major A starts at row s; a transposed A at column s.
      const T* ap = va.transposed ? a + s : a + s * va.ld;
      gemm_blas(ap, va, b, vb, c + s * N, len, N, K, N);
    } else {
      const T* bp = vb.transposed ? b + s * vb.ld : b + s;
      gemm_blas(a, va, bp, vb, c + s, M, len, K, N);
    }
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
    TensorBase a = c.inputs[0], b = c.inputs[1];
    TensorBase& out = c.outputs[0];
    const int64_t batch = out.shape()[0], M = out.shape()[1], N = out.shape()[2];
    const int64_t K = a.shape()[2];
    const bool want_sums = c.outputs.size() > 1 && c.outputs[1].defined();
    if (M * N == 0) {
      if (want_sums) row_sums(a, c.outputs[1]);
      return;
    }
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
          gemm_parallel(pa + i * va.batch_stride, va, pb + i * vb.batch_stride, vb, y + i * M * N,
                        M, N, K);
      }
    }
    if (c.inputs.size() > 2 && c.inputs[2].defined()) add_bias(c.inputs[2], y, batch * M, N);
    if constexpr (!std::is_same_v<T, C>) {
      T* o = out.data<T>();
      for (size_t i = 0; i < wide_out.size(); ++i) o[i] = T(wide_out[i]);
    }
    if (want_sums) row_sums(a, c.outputs[1]);
  }

  static void add_bias(const TensorBase& bias, compute_t<T>* y, int64_t rows, int64_t N) {
    const TensorBase bc = bias.contiguous();
    const T* bp = bc.data<T>();
    parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)),
                 [&](int64_t s, int64_t e) {
                   for (int64_t r = s; r < e; ++r)
                     for (int64_t n = 0; n < N; ++n) y[r * N + n] += load(bp[n]);
                 });
  }

  // sums[m] = sum over k of a[0, m, k], accumulated in double in k order (as `sum` does),
  // split over m only, so the bits do not depend on the thread count. A transposed operand
  // (a linear layer's dY^T) is walked row by row of its memory.
  static void row_sums(const TensorBase& a, TensorBase& sums) {
    TS_CHECK(a.shape()[0] == 1, "matmul: row sums need a batch of one, got ", a.describe());
    const int64_t M = a.shape()[1], K = a.shape()[2];
    const int64_t sm = a.strides()[1], sk = a.strides()[2];
    const T* p = a.data<T>();
    T* o = sums.data<T>();
    parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1)),
                 [&](int64_t s, int64_t e) {
                   std::vector<double> acc(static_cast<size_t>(e - s), 0.0);
                   if (sk == 1) {
                     for (int64_t m = s; m < e; ++m)
                       for (int64_t k = 0; k < K; ++k) acc[m - s] += load(p[m * sm + k]);
                   } else {
                     for (int64_t k = 0; k < K; ++k)
                       for (int64_t m = s; m < e; ++m) acc[m - s] += load(p[m * sm + k * sk]);
                   }
                   for (int64_t m = s; m < e; ++m) o[m] = T(static_cast<compute_t<T>>(acc[m - s]));
                 });
  }

  // Pointer to the operand as C, widening/copying into `scratch` when needed.
  template <class Cc>
  static const Cc* operand(const TensorBase& t, MatrixView& v, std::vector<Cc>& scratch) {
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
  openblas_set_num_threads(1);
  register_floating<Matmul>(Kernel::matmul);
  return true;
}();

}  // namespace
}  // namespace tessera::cpu
