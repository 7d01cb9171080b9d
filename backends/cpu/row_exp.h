// The pieces of a softmax over one contiguous row, vectorised: libm's scalar exp took 5% of a
// GPT-2 124M training step in cross-entropy alone (50304 classes a row). Each element's
// result and the order of every sum depend on the row's length alone: the bits do not depend
// on the thread count or on where the row is in memory.
#pragma once
#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <limits>

#include "flushed_exp.h"

namespace tessera::cpu {

template <class A>
using RowArray = Eigen::Map<const Eigen::Array<A, Eigen::Dynamic, 1>>;

// The largest of x[0, n), -inf for an empty row.
template <class A>
A row_max(const A* x, int64_t n) {
  return n == 0 ? -std::numeric_limits<A>::infinity() : RowArray<A>(x, n).maxCoeff();
}

// out[j] = exp(x[j] - shift) (0 below float's normal range, as flushed_exp.h says); returns
// their sum. out may be x. Eight elements at a time through a fixed-size array, so that every
// element goes through the same vectorised exp: an Eigen expression over a mapped row would
// compute the elements before the first aligned address with the scalar exp, and the bits
// would depend on where the row lies in memory.
template <class A>
A exp_shifted_row(const A* x, A shift, int64_t n, A* out) {
  using Block = Eigen::Array<A, 8, 1>;
  Block lanes = Block::Zero();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const Block e = exp_flush_subnormal(Eigen::Map<const Block>(x + j) - shift);
    Eigen::Map<Block>(out + j) = e;
    lanes += e;
  }
  A sum = 0;
  if (j < n) {  // the last n - j elements, padded
    Block v = Block::Constant(shift);
    for (int64_t k = 0; j + k < n; ++k) v[k] = x[j + k];
    const Block e = exp_flush_subnormal(v - shift);
    for (int64_t k = 0; j + k < n; ++k) sum += (out[j + k] = e[k]);
  }
  for (int k = 0; k < 8; ++k) sum += lanes[k];
  return sum;
}

}  // namespace tessera::cpu
