// Sums in a fixed order that the compiler can vectorise: a plain `s += f(j)` loop is one
// dependency chain it may not reorder (floating-point addition is not associative), so it
// runs one add at a time. Eight interleaved partial sums, added in order at the end, give
// the same bits on every run and at any thread count, and fill two AVX registers.
#pragma once
#include <cstdint>

namespace tessera::cpu {

template <class A, class F>
A lane_sum(int64_t n, F f) {
  A acc[8] = {A(0), A(0), A(0), A(0), A(0), A(0), A(0), A(0)};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) acc[k] += f(j + k);
  A s = 0;
  for (; j < n; ++j) s += f(j);
  for (A a : acc) s += a;
  return s;
}

}  // namespace tessera::cpu
