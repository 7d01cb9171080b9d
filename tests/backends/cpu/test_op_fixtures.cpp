// Replays PyTorch's float64 results (tests/fixtures/ops.json, made by
// tests/fixtures/generate_op_fixtures.py) through Tessera's ops: forward and gradient, in
// float64 and float32.
#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "tessera/tessera.h"
#include "tessera/testing.h"

using namespace tessera;
using json = nlohmann::json;

namespace {

Tensor decode(const json& j) {
  const Shape shape = j["shape"].get<Shape>();
  const std::string dt = j["dtype"];
  if (dt == "int64") return from_vector(j["data"].get<std::vector<int64_t>>(), shape, DType::Int64);
  if (dt == "bool") {
    std::vector<double> v;
    for (bool b : j["data"].get<std::vector<bool>>()) v.push_back(b ? 1.0 : 0.0);
    return from_vector(v, shape, DType::Bool);
  }
  REQUIRE(dt == "float64");
  return from_vector(j["data"].get<std::vector<double>>(), shape, DType::Float64);
}

std::vector<int64_t> dims_of(const json& args) {
  return args.value("dims", std::vector<int64_t>{});
}

using OpFn = std::function<Tensor(const std::vector<Tensor>&, const json&)>;

const std::map<std::string, OpFn>& ops() {
  static const std::map<std::string, OpFn> m = {
      {"add", [](auto& x, auto&) { return add(x[0], x[1]); }},
      {"sub", [](auto& x, auto&) { return sub(x[0], x[1]); }},
      {"mul", [](auto& x, auto&) { return mul(x[0], x[1]); }},
      {"div", [](auto& x, auto&) { return div(x[0], x[1]); }},
      {"pow", [](auto& x, auto&) { return pow(x[0], x[1]); }},
      {"neg", [](auto& x, auto&) { return neg(x[0]); }},
      {"exp", [](auto& x, auto&) { return exp(x[0]); }},
      {"log", [](auto& x, auto&) { return log(x[0]); }},
      {"sqrt", [](auto& x, auto&) { return sqrt(x[0]); }},
      {"rsqrt", [](auto& x, auto&) { return rsqrt(x[0]); }},
      {"abs", [](auto& x, auto&) { return abs(x[0]); }},
      {"tanh", [](auto& x, auto&) { return tanh(x[0]); }},
      {"sigmoid", [](auto& x, auto&) { return sigmoid(x[0]); }},
      {"relu", [](auto& x, auto&) { return relu(x[0]); }},
      {"gelu", [](auto& x, auto&) { return gelu(x[0]); }},
      {"gelu_tanh", [](auto& x, auto&) { return gelu(x[0], GeluApprox::Tanh); }},
      {"eq", [](auto& x, auto&) { return eq(x[0], x[1]); }},
      {"ne", [](auto& x, auto&) { return ne(x[0], x[1]); }},
      {"lt", [](auto& x, auto&) { return lt(x[0], x[1]); }},
      {"le", [](auto& x, auto&) { return le(x[0], x[1]); }},
      {"gt", [](auto& x, auto&) { return gt(x[0], x[1]); }},
      {"ge", [](auto& x, auto&) { return ge(x[0], x[1]); }},
      {"where", [](auto& x, auto&) { return where(x[0], x[1], x[2]); }},
      {"masked_fill", [](auto& x, auto&) { return masked_fill(x[0], x[1], -2.5); }},
      {"sum", [](auto& x, auto& a) { return sum(x[0], dims_of(a), a["keepdim"]); }},
      {"mean", [](auto& x, auto& a) { return mean(x[0], dims_of(a), a["keepdim"]); }},
      {"amax", [](auto& x, auto& a) { return amax(x[0], dims_of(a), a["keepdim"]); }},
      {"amin", [](auto& x, auto& a) { return amin(x[0], dims_of(a), a["keepdim"]); }},
      {"var", [](auto& x, auto& a) { return var(x[0], dims_of(a), 1, a["keepdim"]); }},
      {"norm", [](auto& x, auto& a) { return norm(x[0], dims_of(a), a["keepdim"]); }},
      {"argmax", [](auto& x, auto& a) { return argmax(x[0], a["dim"]); }},
      {"matmul", [](auto& x, auto&) { return matmul(x[0], x[1]); }},
      {"linear", [](auto& x, auto&) { return linear(x[0], x[1], x.size() > 2 ? x[2] : Tensor()); }},
      {"softmax", [](auto& x, auto& a) { return softmax(x[0], a["dim"]); }},
      {"log_softmax", [](auto& x, auto& a) { return log_softmax(x[0], a["dim"]); }},
      {"layer_norm",
       [](auto& x, auto& a) {
         return layer_norm(x[0], a["normalized"].template get<Shape>(), x[1], x[2], a["eps"]);
       }},
      {"embedding", [](auto& x, auto&) { return embedding(x[0], x[1]); }},
      {"cross_entropy",
       [](auto& x, auto& a) {
         return cross_entropy(x[0], x[1], a["ignore_index"], a["label_smoothing"]);
       }},
      {"attention",
       [](auto& x, auto& a) {
         return scaled_dot_product_attention(x[0], x[1], x[2], x.size() > 3 ? x[3] : Tensor(),
                                             a["causal"]);
       }},
      {"cat",
       [](auto& x, auto& a) {
         return cat({x[0], x[1]}, a["dim"]);
       }},
      {"stack",
       [](auto& x, auto& a) {
         return stack({x[0], x[1]}, a["dim"]);
       }},
      {"split",
       [](auto& x, auto& a) {
         return split(x[0], a["sizes"].template get<std::vector<int64_t>>(),
                      a["dim"])[a["index"].template get<int>()];
       }},
  };
  return m;
}

const json& fixtures() {
  static const json j = [] {
    std::ifstream f(TESSERA_FIXTURES_DIR "/ops.json");
    REQUIRE_MESSAGE(f.good(), "cannot open " TESSERA_FIXTURES_DIR "/ops.json");
    return json::parse(f);
  }();
  return j;
}

void replay(DType dtype, testing::Tolerance tol) {
  int n = 0;
  for (const json& c : fixtures()["cases"]) {
    const std::string op = c["op"];
    INFO("op ", op, " case ", n, " at ", dtype_name(dtype));
    ++n;
    auto it = ops().find(op);
    REQUIRE_MESSAGE(it != ops().end(), "fixture op without a replay: " << op);
    std::vector<Tensor> in;
    for (const json& j : c["inputs"]) {
      Tensor t = decode(j);
      if (t.dtype() == DType::Float64) t = t.to(dtype).detach().requires_grad_(c.contains("grads"));
      in.push_back(t);
    }
    const Tensor out = it->second(in, c["args"]);
    const Tensor expected = decode(c["output"]);
    const auto r =
        testing::compare(out.to(is_floating(out.dtype()) ? DType::Float64 : out.dtype()), expected,
                         is_floating(out.dtype()) ? tol : testing::Tolerance{0, 0});
    CHECK_MESSAGE(r.ok, "forward: " << r.message);
    if (!c.contains("grads")) continue;
    sum(out * decode(c["v"]).to(dtype)).backward();
    for (size_t i = 0; i < in.size(); ++i) {
      if (c["grads"][i].is_null()) continue;
      const auto g = testing::compare(in[i].grad().to(DType::Float64), decode(c["grads"][i]), tol);
      CHECK_MESSAGE(g.ok, "gradient of input " << i << ": " << g.message);
    }
  }
  CHECK(n >= 70);
}

}  // namespace

TEST_CASE("ops match PyTorch float64 fixtures in float64") {
  replay(DType::Float64, {1e-10, 1e-12});
}

TEST_CASE("ops match PyTorch float64 fixtures in float32") {
  replay(DType::Float32, {2e-4, 2e-5});
}
