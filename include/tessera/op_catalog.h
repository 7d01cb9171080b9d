// Every public op, with the inputs it is checked on. Drives `tessera kernels check/bench`
// and the parameterised op test: each op runs on the device and dtype under test and is
// compared with the float64 CPU result on the same (rounded) inputs, forward and gradient;
// gradients are also checked against finite differences in float64.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tessera/tensor.h"
#include "tessera/testing.h"

namespace tessera::testing {

enum class InputKind {
  Normal,         // standard normal
  Positive,       // uniform in [0.5, 2)
  AwayFromZero,   // |x| in [0.5, 1.5), random sign
  SmallInt,       // integers 0, 1, 2 stored as float (ties for comparisons)
  Index,          // int64 in [0, high)
  IndexOrIgnore,  // int64 in [0, high), about a quarter set to -100
  Mask,           // bool, mostly true, last dim's first entry always true
};

struct InputSpec {
  Shape shape;
  InputKind kind = InputKind::Normal;
  int64_t high = 0;            // for Index kinds
  bool transposed = false;     // built as a transposed (non-contiguous) view of this shape
  bool differentiable = true;  // floating inputs only
};

struct OpCase {
  std::string label;
  std::vector<InputSpec> inputs;
  std::vector<int64_t> dims;  // op-specific integer arguments
  bool flag = false;          // op-specific switch
};

struct OpContext {
  DType dtype;
  Device device;
  const OpCase& op_case;
};

struct OpSpec {
  std::string name;
  std::string kernels;  // backend kernels it exercises
  std::vector<OpCase> cases;
  std::function<Tensor(const std::vector<Tensor>&, const OpContext&)> fn;
  bool differentiable = true;
  bool finite_differences = true;  // false where the op is not smooth at float64 (casts)
  bool exact_reference = false;    // creation/random ops: compare with cpu at the same dtype
  // Benchmark: inputs for a --shape argument, and the op's flops for GEMM-like ops (unset:
  // the benchmark reports bytes moved instead).
  std::function<OpCase(const Shape&)> bench_case;
  std::function<double(const Shape&)> flops;
};

const std::vector<OpSpec>& op_catalog();
const OpSpec* find_op(const std::string& name);

// Float64 (or int64/bool) CPU inputs for a case; deterministic in `seed`.
std::vector<Tensor> make_inputs(const OpCase& c, uint64_t seed);

struct CheckResult {
  std::string op, label, what;  // what: "forward", "gradient", "finite-difference"
  bool ok = true;
  std::string message;
};
// Checks one op on every case at (device, dtype). Returns one result per check made.
// The float64 finite-difference check does not depend on device or dtype; `finite_differences`
// lets a caller checking several dtypes run it once.
std::vector<CheckResult> check_op(const OpSpec& spec, Device device, DType dtype,
                                  bool finite_differences = true);

}  // namespace tessera::testing
