// exp (and sigmoid) for Eigen arrays that return 0 below the normal range. Eigen 3.4's vectorised
// exp clamps its argument at the bottom of the normal range, so exp(-inf) comes out as 2.9e-39
// (float) or ~1e-308 (double) instead of 0: a wrong value, and a subnormal that makes every
// later multiplication by it take a microcode assist. Causal attention feeds the masked
// (-inf) scores of every row through exp and then into a GEMM: ~30x slower than it should
// be (measured: [12,4,64,32] forward 13.4 ms against 0.43 ms). Results under the smallest
// normal (x < -87.3 in float, -708.4 in double) are 0 here; the rest is Eigen's exp. The
// mask is computed with min/max so the expression stays vectorised (a select is not).
#pragma once
#include <cmath>
#include <limits>

namespace tessera::cpu {

// 1 where exp(x) is a normal number (from just above ln(smallest normal)), 0 at or below
// it and for -inf; NaN stays NaN.
template <class Expr>
auto normal_range_mask(const Expr& x) {
  using S = typename Expr::Scalar;
  const S lo = std::log(std::numeric_limits<S>::min());
  return ((x - lo) * S(1e30)).max(S(0)).min(S(1));
}

template <class Expr>
auto exp_flush_subnormal(const Expr& x) {
  return x.exp() * normal_range_mask(x);
}

// Eigen's logistic goes through the same exp: sigmoid(-inf) came out as 2.9e-39.
template <class Expr>
auto sigmoid_flush_subnormal(const Expr& x) {
  return x.logistic() * normal_range_mask(x);
}

}  // namespace tessera::cpu
