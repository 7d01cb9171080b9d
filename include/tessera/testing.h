// Kernel testing for users' own test suites: compare a result with a float64 reference at
// dtype-aware tolerances (reporting the worst element), and check gradients by finite
// differences in float64. Works with any test framework; with doctest included first, the
// TS_CHECK_CLOSE / TS_CHECK_GRADCHECK macros report through doctest.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::testing {

struct Tolerance {
  double rtol;
  double atol;
};
// float64 1e-10/1e-12, float32 1e-4/1e-5, bfloat16 2e-2/2e-2, float16 5e-3/5e-3, ints exact.
Tolerance tolerance_for(DType dtype);

struct CompareResult {
  bool ok = true;
  int64_t worst_index = -1;  // flat index of the element furthest outside tolerance
  double actual = 0, expected = 0, abs_error = 0;
  std::string message;  // "ok" or what differs, where, by how much
};
// |actual - expected| <= atol + rtol * |expected| elementwise; NaN matches only NaN.
CompareResult compare(const Tensor& actual, const Tensor& expected, Tolerance tol);
CompareResult compare(const Tensor& actual, const Tensor& expected);  // tolerance of actual's dtype

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;
};
struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 1234;  // for the random output projection
};
// Checks the analytic gradient of fn at float64 `inputs` against central differences of
// <fn(x), v> for a fixed random v. Inputs that do not require grad are held constant.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace tessera::testing

#ifdef DOCTEST_LIBRARY_INCLUDED
#define TS_CHECK_CLOSE(actual, expected)                                 \
  do {                                                                   \
    const auto ts_r = ::tessera::testing::compare((actual), (expected)); \
    CHECK_MESSAGE(ts_r.ok, ts_r.message);                                \
  } while (0)
#define TS_CHECK_CLOSE_TOL(actual, expected, rtol, atol)                                   \
  do {                                                                                     \
    const auto ts_r = ::tessera::testing::compare((actual), (expected), {(rtol), (atol)}); \
    CHECK_MESSAGE(ts_r.ok, ts_r.message);                                                  \
  } while (0)
#define TS_CHECK_GRADCHECK(fn, inputs)                               \
  do {                                                               \
    const auto ts_g = ::tessera::testing::gradcheck((fn), (inputs)); \
    CHECK_MESSAGE(ts_g.ok, ts_g.message);                            \
  } while (0)
#endif
