// The op catalog: unary and binary elementwise ops (and GELU fused with a bias add),
// comparisons, where, casts and copies.
#include "catalog_builders.h"

namespace tessera::testing::catalog {

void add_elementwise_ops(std::vector<OpSpec>& ops) {
  ops.push_back(unary("neg", &neg));
  ops.push_back(unary("exp", &exp));
  ops.push_back(unary("log", &log, InputKind::Positive));
  ops.push_back(unary("sqrt", &sqrt, InputKind::Positive));
  ops.push_back(unary("rsqrt", &rsqrt, InputKind::Positive));
  ops.push_back(unary("abs", &abs, InputKind::AwayFromZero));
  ops.push_back(unary("tanh", &tanh));
  ops.push_back(unary("sigmoid", &sigmoid));
  ops.push_back(unary("relu", &relu, InputKind::AwayFromZero));
  {
    OpSpec s = unary("gelu", &relu);
    s.kernels = "gelu, gelu_backward";
    s.fn = [](const Inputs& x, const OpContext&) { return gelu(x[0]); };
    ops.push_back(s);
    s.name = "gelu_tanh";
    s.kernels = "gelu_tanh, gelu_tanh_backward";
    s.fn = [](const Inputs& x, const OpContext&) { return gelu(x[0], GeluApprox::Tanh); };
    ops.push_back(s);
  }
  // GELU fused with the bias add before it (DeepSpeed's transformer kernel).
  for (const bool tanh_form : {false, true}) {
    OpSpec s{tanh_form ? "bias_gelu_tanh" : "bias_gelu",
             "bias_gelu, bias_gelu_backward",
             {{"[5,6] + [6]", {in({5, 6}), in({6})}},
              {"[2,3,8] + [8]", {in({2, 3, 8}), in({8})}},
              {"[7] + [7]", {in({7}), in({7})}}},
             [tanh_form](const Inputs& x, const OpContext&) {
               return bias_gelu(x[0], x[1], tanh_form ? GeluApprox::Tanh : GeluApprox::None);
             }};
    s.bench_case = [](const Shape& sh) { return OpCase{"bench", {in(sh), in({sh.back()})}}; };
    ops.push_back(s);
  }
  ops.push_back(binary("add", &add));
  ops.push_back(binary("sub", &sub));
  ops.push_back(binary("mul", &mul));
  ops.push_back(binary("div", &div, InputKind::AwayFromZero));
  {
    OpSpec s = binary("pow", static_cast<Tensor (*)(const Tensor&, const Tensor&)>(&pow));
    for (auto& c : s.cases) c.inputs[0].kind = InputKind::Positive;
    s.bench_case = [](const Shape& sh) {
      OpCase c = elementwise_bench(sh, 2);
      c.inputs[0].kind = InputKind::Positive;
      return c;
    };
    ops.push_back(s);
  }
  ops.push_back(compare_op("eq", &eq));
  ops.push_back(compare_op("ne", &ne));
  ops.push_back(compare_op("lt", &lt));
  ops.push_back(compare_op("le", &le));
  ops.push_back(compare_op("gt", &gt));
  ops.push_back(compare_op("ge", &ge));
  ops.push_back({"where",
                 "where",
                 {{"cond[3,1] a[3,4] b[4]", {in({3, 1}, InputKind::Mask), in({3, 4}), in({4})}},
                  {"cond[2,3] a[] b[2,3]T", {in({2, 3}, InputKind::Mask), in({}), tin({2, 3})}}},
                 [](const Inputs& x, const OpContext&) { return where(x[0], x[1], x[2]); }});
  ops.push_back({"masked_fill",
                 "where",
                 {{"x[3,4] mask[1,4]", {in({3, 4}), in({1, 4}, InputKind::Mask)}}},
                 [](const Inputs& x, const OpContext&) { return masked_fill(x[0], x[1], -2.5); }});
  {
    OpSpec s{"cast",
             "copy",
             {{"[3,4] via bfloat16, float16", {in({3, 4})}}, {"[4,3]T", {tin({4, 3})}}},
             [](const Inputs& x, const OpContext&) {
               return x[0].to(DType::BFloat16).to(DType::Float16).to(x[0].dtype());
             }};
    s.finite_differences = false;  // rounding is piecewise constant: differences see 0
    ops.push_back(s);
  }
  {
    // A plain copy: its bench figure is the memory-bandwidth ceiling other kernels are
    // compared with.
    OpSpec s{"clone",
             "copy",
             {{"[3,4]", {in({3, 4})}}, {"[4,3]T", {tin({4, 3})}}},
             [](const Inputs& x, const OpContext&) { return x[0].clone(); }};
    s.bench_case = [](const Shape& sh) { return elementwise_bench(sh, 1); };
    ops.push_back(s);
  }
  {
    OpSpec s{
        "cast_int",
        "copy",
        {{"[3,4] ints", {in({3, 4}, InputKind::SmallInt)}}},
        [](const Inputs& x, const OpContext&) {
          return (x[0].to(DType::Int32) * x[0].to(DType::Int64)).to(DType::Bool).to(x[0].dtype());
        }};
    s.differentiable = false;
    ops.push_back(s);
  }
}

}  // namespace tessera::testing::catalog
