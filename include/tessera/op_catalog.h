// Every public op, with the inputs it is checked on. Drives `tessera kernels check/bench`
// and the parameterised op test: each op runs on the device and dtype under test and is
// compared with the float64 CPU result on the same (rounded) inputs, forward and gradient;
// gradients are also checked against finite differences in float64.
#pragma once
#include <functional>
#include <map>
#include <optional>
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
  // Random ops built on log/cos (normal): a GPU's math library rounds those within a few ulps
  // of glibc's, not bit for bit, so values off the CPU may differ by this many ulps.
  int device_ulps = 0;
  // Benchmark: inputs for a --shape argument, and the op's flops for GEMM-like ops (unset:
  // the benchmark reports bytes moved instead).
  std::function<OpCase(const Shape&)> bench_case;
  std::function<double(const Shape&)> flops;
};

const std::vector<OpSpec>& op_catalog();
const OpSpec* find_op(const std::string& name);

// Float64 (or int64/bool) CPU inputs for a case; deterministic in `seed` (case i of an op
// uses seed i + 1).
std::vector<Tensor> make_inputs(const OpCase& c, uint64_t seed);
// Whether the input holds floating values (not indices or a mask).
bool is_float_input(const InputSpec& s);

// Independent float64 results for the catalog's own inputs: PyTorch's output and gradient
// of each case, and for the random ops the values of a separate Philox 4x32-10
// implementation; written by tests/fixtures/generate_catalog_fixtures.py
// (tests/fixtures/catalog_reference.json, installed to <datadir>/tessera/).
struct CaseReference {
  std::string source;          // e.g. "pytorch 1.13.0", "philox (python)"
  std::vector<Tensor> inputs;  // the values the catalog makes (a stale file is detected)
  Tensor output;               // float64 / int64 / bool
  std::map<std::string, Tensor> output_by_dtype;  // random ops: "float64" and "float32" paths
  Tensor v;                                       // gradient direction (differentiable ops)
  std::vector<Tensor> grads;  // d sum(output * v) / d input; undefined where none
};

class CatalogReference {
 public:
  // Errors name the file and the entry that is malformed.
  static CatalogReference load(const std::string& path);
  // The first readable file of: `explicit_path` if given, else the installed copy and the
  // source tree's; nullopt (with the places tried in `tried`) when none exists.
  static std::optional<CatalogReference> find(const std::string& explicit_path,
                                              std::string* tried = nullptr);
  const CaseReference* find_case(const std::string& op, const std::string& label) const;
  const std::string& path() const { return path_; }
  size_t size() const { return cases_.size(); }

 private:
  std::string path_;
  std::map<std::pair<std::string, std::string>, CaseReference> cases_;
};

struct CheckResult {
  std::string op, label, what;  // what: "forward", "gradient", "finite-difference"
  std::string reference;        // what it was compared with: "pytorch ...", "float64 cpu",
                                // "cpu <dtype>", "philox (python)", "finite differences"
  bool ok = true;
  std::string message;
};
// Checks one op on every case at (device, dtype). Returns one result per check made. Every
// check has an independent reference: float64 on the CPU is compared with `reference` (no
// forward/gradient check is made there without one: it would compare the op with itself);
// other dtypes and devices with the float64 CPU result on the same rounded inputs; float64
// gradients with finite differences (once: `finite_differences`).
std::vector<CheckResult> check_op(const OpSpec& spec, Device device, DType dtype,
                                  bool finite_differences = true,
                                  const CatalogReference* reference = nullptr);

}  // namespace tessera::testing
