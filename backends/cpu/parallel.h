// Static work partitioning over OpenMP threads. Each index is always computed the same way
// whatever the thread count, so results are bit-identical from run to run.
#pragma once
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "tessera/shape.h"

namespace tessera::cpu {

// Calls f(begin, end) over disjoint ranges covering [0, n); serial when n <= grain.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n <= grain || omp_get_max_threads() == 1 || omp_in_parallel()) {
    f(int64_t{0}, n);
    return;
  }
  const int64_t max_chunks = (n + grain - 1) / grain;
#pragma omp parallel num_threads( \
    static_cast <int>(std::min <int64_t>(omp_get_max_threads(), max_chunks)))
  {
    const int64_t nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = tid * chunk, e = std::min(n, b + chunk);
    if (b < e) f(b, e);
  }
}

// Walks `shape` row by row (a row = the last dim) for N strided operands. Calls
// row(offsets, len, inner_strides, row_index) where offsets are in elements.
template <size_t N, class F>
void for_each_row(const Shape& shape, const std::array<const Shape*, N>& strides, F&& row) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  if (nd == 0) {
    row(std::array<int64_t, N>{}, int64_t{1}, std::array<int64_t, N>{}, int64_t{0});
    return;
  }
  const int64_t inner = shape[nd - 1];
  if (inner == 0) return;
  const int64_t rows = numel_of(shape) / inner;
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = (*strides[k])[nd - 1];
  parallel_for(rows, std::max<int64_t>(1, 16384 / inner), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      std::array<int64_t, N> off{};
      int64_t rem = r;
      for (int64_t d = nd - 2; d >= 0; --d) {
        const int64_t i = rem % shape[d];
        rem /= shape[d];
        for (size_t k = 0; k < N; ++k) off[k] += i * (*strides[k])[d];
      }
      row(off, inner, inner_strides, r);
    }
  });
}

}  // namespace tessera::cpu
