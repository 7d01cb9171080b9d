// Prints every op-catalog case's float64 inputs and gradient direction as JSON, for
// tests/fixtures/generate_catalog_fixtures.py to compute PyTorch's results on exactly these.
//   build/tests/catalog-inputs > cases.json
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessera/grad_mode.h"
#include "tessera/op_catalog.h"
#include "tessera/ops.h"

using namespace tessera;
using json = nlohmann::json;

namespace {
json encode(const Tensor& t) {
  const Tensor c = t.contiguous();
  json data = json::array();
  for (double v : c.to_vector()) {
    if (c.dtype() == DType::Int64)
      data.push_back(static_cast<int64_t>(v));  // catalog indices are small: exact in double
    else
      data.push_back(v);
  }
  const char* dt = c.dtype() == DType::Int64  ? "int64"
                   : c.dtype() == DType::Bool ? "bool"
                                              : "float64";
  return {{"shape", c.shape()}, {"dtype", dt}, {"data", data}};
}
}  // namespace

int main() {
  json cases = json::array();
  for (const auto& spec : testing::op_catalog()) {
    uint64_t seed = 1;
    for (const auto& c : spec.cases) {
      const std::vector<Tensor> in = testing::make_inputs(c, seed++);
      json entry{{"op", spec.name},
                 {"label", c.label},
                 {"dims", c.dims},
                 {"flag", c.flag},
                 {"differentiable", spec.differentiable},
                 {"inputs", json::array()}};
      for (const Tensor& t : in) entry["inputs"].push_back(encode(t));
      if (spec.differentiable && !spec.exact_reference) {
        NoGradGuard no_grad;
        const Tensor y = spec.fn(in, testing::OpContext{DType::Float64, Device::cpu(), c});
        Generator gen(99);  // the direction check_op's other checks use too
        entry["v"] = encode(randn(y.shape(), DType::Float64, Device::cpu(), &gen));
      }
      cases.push_back(entry);
    }
  }
  std::cout << json{{"cases", cases}}.dump() << "\n";
  return 0;
}
