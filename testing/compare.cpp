#include <cmath>
#include <sstream>

#include "tessera/testing.h"

namespace tessera::testing {

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::Float64:
      return {1e-10, 1e-12};
    case DType::Float32:
      return {1e-4, 1e-5};
    case DType::BFloat16:
      return {2e-2, 2e-2};
    case DType::Float16:
      return {5e-3, 5e-3};
    default:
      return {0.0, 0.0};
  }
}

CompareResult compare(const Tensor& actual, const Tensor& expected) {
  return compare(actual, expected, tolerance_for(actual.dtype()));
}

CompareResult compare(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  CompareResult r;
  std::ostringstream os;
  if (actual.shape() != expected.shape()) {
    r.ok = false;
    os << "shape mismatch: actual " << actual.describe() << ", expected " << expected.describe();
    r.message = os.str();
    return r;
  }
  const std::vector<double> a = actual.to_vector(), e = expected.to_vector();
  double worst_excess = -1;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool both_nan = std::isnan(a[i]) && std::isnan(e[i]);
    const bool same_inf = std::isinf(a[i]) && a[i] == e[i];
    if (both_nan || same_inf) continue;
    const double err = std::fabs(a[i] - e[i]);
    const double allowed = tol.atol + tol.rtol * std::fabs(e[i]);
    const double excess = std::isnan(err) ? INFINITY : err - allowed;
    if (excess > 0) ++bad;
    if (excess > worst_excess || r.worst_index < 0) {
      worst_excess = excess;
      r.worst_index = static_cast<int64_t>(i);
      r.actual = a[i];
      r.expected = e[i];
      r.abs_error = err;
    }
  }
  r.ok = bad == 0;
  if (r.ok) {
    os << "ok (max abs error " << r.abs_error << ")";
  } else {
    os.precision(9);
    os << bad << " of " << a.size() << " elements of " << actual.describe()
       << " outside rtol=" << tol.rtol << " atol=" << tol.atol << "; worst at flat index "
       << r.worst_index << ": actual " << r.actual << ", expected " << r.expected << " (abs error "
       << r.abs_error << ")";
  }
  r.message = os.str();
  return r;
}

}  // namespace tessera::testing
