#include "tessera/op_catalog.h"

#include <cmath>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/optim/optimizer.h"

namespace tessera::testing {

namespace {

using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&, const OpContext&)>;

InputSpec in(Shape s, InputKind k = InputKind::Normal) {
  return {std::move(s), k};
}
InputSpec tin(Shape s) {
  return {std::move(s), InputKind::Normal, 0, true};
}
InputSpec idx(Shape s, int64_t high, InputKind k = InputKind::Index) {
  return {std::move(s), k, high, false, false};
}

OpCase elementwise_bench(const Shape& s, int arity) {
  OpCase c{"bench", {}};
  for (int i = 0; i < arity; ++i) c.inputs.push_back(in(s.empty() ? Shape{1 << 20} : s));
  return c;
}

std::vector<OpCase> unary_cases(InputKind k = InputKind::Normal) {
  return {{"[7]", {in({7}, k)}},
          {"[3,5]", {in({3, 5}, k)}},
          {"[5,3] transposed", {{{5, 3}, k, 0, true}}},
          {"[]", {in({}, k)}}};
}

std::vector<OpCase> binary_cases(InputKind kb = InputKind::Normal) {
  return {{"[3,4]+[3,4]", {in({3, 4}), in({3, 4}, kb)}},
          {"[3,1,4]+[5,1] broadcast", {in({3, 1, 4}), in({5, 1}, kb)}},
          {"[3,4]T+[3,4]", {tin({3, 4}), in({3, 4}, kb)}},
          {"[]+[2,3]", {in({}), in({2, 3}, kb)}}};
}

OpSpec unary(const std::string& name, Tensor (*f)(const Tensor&), InputKind k = InputKind::Normal) {
  OpSpec s{name, name, unary_cases(k), [f](const Inputs& x, const OpContext&) { return f(x[0]); }};
  s.bench_case = [k](const Shape& sh) {
    OpCase c = elementwise_bench(sh, 1);
    c.inputs[0].kind = k;
    return c;
  };
  return s;
}

OpSpec binary(const std::string& name, Tensor (*f)(const Tensor&, const Tensor&),
              InputKind kb = InputKind::Normal, bool differentiable = true) {
  OpSpec s{name, name, binary_cases(kb),
           [f](const Inputs& x, const OpContext&) { return f(x[0], x[1]); }};
  s.differentiable = differentiable;
  s.bench_case = [kb](const Shape& sh) {
    OpCase c = elementwise_bench(sh, 2);
    c.inputs[1].kind = kb;
    return c;
  };
  return s;
}

OpSpec compare_op(const std::string& name, Tensor (*f)(const Tensor&, const Tensor&)) {
  OpSpec s = binary(name, f, InputKind::SmallInt, false);
  for (auto& c : s.cases) c.inputs[0].kind = InputKind::SmallInt;
  return s;
}

OpSpec reduction(const std::string& name,
                 std::function<Tensor(const Tensor&, std::vector<int64_t>, bool)> f,
                 bool differentiable = true) {
  OpSpec s{
      name,
      name,
      {{"[4,5] all", {in({4, 5})}, {}, false},
       {"[3,4,5] dims 0,2 keepdim", {in({3, 4, 5})}, {0, 2}, true},
       {"[3,4,5] dim 1", {in({3, 4, 5})}, {1}, false},
       {"[6,4]T dim -1", {tin({6, 4})}, {-1}, false}},
      [f](const Inputs& x, const OpContext& c) { return f(x[0], c.op_case.dims, c.op_case.flag); }};
  s.differentiable = differentiable;
  s.bench_case = [](const Shape& sh) {
    OpCase c = elementwise_bench(sh, 1);
    c.dims = {-1};
    return c;
  };
  return s;
}

std::vector<OpSpec> build_catalog() {
  std::vector<OpSpec> ops;
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
  ops.push_back(reduction(
      "sum", [](const Tensor& x, std::vector<int64_t> d, bool k) { return sum(x, d, k); }));
  ops.push_back(reduction(
      "mean", [](const Tensor& x, std::vector<int64_t> d, bool k) { return mean(x, d, k); }));
  ops.push_back(reduction(
      "amax", [](const Tensor& x, std::vector<int64_t> d, bool k) { return amax(x, d, k); }));
  ops.push_back(reduction(
      "amin", [](const Tensor& x, std::vector<int64_t> d, bool k) { return amin(x, d, k); }));
  ops.push_back(reduction(
      "var", [](const Tensor& x, std::vector<int64_t> d, bool k) { return var(x, d, 1, k); }));
  ops.push_back(reduction(
      "norm", [](const Tensor& x, std::vector<int64_t> d, bool k) { return norm(x, d, k); }));
  {
    OpSpec s = reduction(
        "argmax",
        [](const Tensor& x, std::vector<int64_t> d, bool k) {
          return argmax(x, d.empty() ? 0 : d[0], k);
        },
        false);
    s.cases[0].dims = {0};
    s.cases[1].dims = {2};
    ops.push_back(s);
  }
  {
    OpSpec s{"matmul",
             "matmul",
             {{"[3,4]@[4,5]", {in({3, 4}), in({4, 5})}},
              {"[2,3,4]@[4,5] folded", {in({2, 3, 4}), in({4, 5})}},
              {"[2,3,4]@[2,4,5] batched", {in({2, 3, 4}), in({2, 4, 5})}},
              {"[2,1,3,4]@[3,4,2] broadcast", {in({2, 1, 3, 4}), in({3, 4, 2})}},
              {"[3,4]T@[4,5]T transposed", {tin({3, 4}), tin({4, 5})}},
              {"[4]@[4,5]", {in({4}), in({4, 5})}},
              {"[3,4]@[4]", {in({3, 4}), in({4})}}},
             [](const Inputs& x, const OpContext&) { return matmul(x[0], x[1]); }};
    s.bench_case = [](const Shape& sh) {
      TS_CHECK(sh.size() == 3 || sh.size() == 4, "matmul bench: --shape M,N,K or B,M,N,K");
      const bool b = sh.size() == 4;
      const int64_t B = b ? sh[0] : 1, M = sh[b], N = sh[b + 1], K = sh[b + 2];
      return OpCase{"bench",
                    {in(b ? Shape{B, M, K} : Shape{M, K}), in(b ? Shape{B, K, N} : Shape{K, N})}};
    };
    s.flops = [](const Shape& sh) {
      return sh.size() == 4 ? 2.0 * sh[0] * sh[1] * sh[2] * sh[3] : 2.0 * sh[0] * sh[1] * sh[2];
    };
    ops.push_back(s);
  }
  {
    // x @ weight^T + bias: the bias rides in the product and its gradient comes out of the
    // weight-gradient product (cuBLASLt epilogues on GPUs).
    OpSpec s{"linear",
             "matmul (with bias, and with the bias gradient)",
             {{"[3,4] w[5,4] b[5]", {in({3, 4}), in({5, 4}), in({5})}},
              {"[2,3,4] w[6,4] b[6]", {in({2, 3, 4}), in({6, 4}), in({6})}},
              {"[3,4]T w[5,4] b[5] transposed input", {tin({3, 4}), in({5, 4}), in({5})}},
              {"[7,4] w[3,4] no bias", {in({7, 4}), in({3, 4})}}},
             [](const Inputs& x, const OpContext&) {
               return linear(x[0], x[1], x.size() > 2 ? x[2] : Tensor());
             }};
    s.bench_case = [](const Shape& sh) {
      TS_CHECK(sh.size() == 3, "linear bench: --shape M,N,K (input [M,K], weight [N,K])");
      return OpCase{"bench", {in({sh[0], sh[2]}), in({sh[1], sh[2]}), in({sh[1]})}};
    };
    s.flops = [](const Shape& sh) { return 2.0 * sh[0] * sh[1] * sh[2]; };
    ops.push_back(s);
  }
  for (bool log : {false, true}) {
    OpSpec s{log ? "log_softmax" : "softmax",
             log ? "log_softmax, log_softmax_backward" : "softmax, softmax_backward",
             {{"[3,7] dim -1", {in({3, 7})}, {-1}}, {"[4,5,6] dim 1", {in({4, 5, 6})}, {1}}},
             [log](const Inputs& x, const OpContext& c) {
               return log ? log_softmax(x[0], c.op_case.dims[0]) : softmax(x[0], c.op_case.dims[0]);
             }};
    s.bench_case = [](const Shape& sh) { return OpCase{"bench", {in(sh)}, {-1}}; };
    ops.push_back(s);
  }
  {
    OpSpec s{"layer_norm",
             "layer_norm, layer_norm_backward",
             {{"[3,8] affine", {in({3, 8}), in({8}), in({8})}},
              {"[2,3,4] over [3,4]", {in({2, 3, 4}), in({3, 4}), in({3, 4})}, {2}},
              {"[5,6] no affine", {in({5, 6})}}},
             [](const Inputs& x, const OpContext& c) {
               const int64_t nd = c.op_case.dims.empty() ? 1 : c.op_case.dims[0];
               const Shape ns(x[0].shape().end() - nd, x[0].shape().end());
               return layer_norm(x[0], ns, x.size() > 1 ? x[1] : Tensor(),
                                 x.size() > 2 ? x[2] : Tensor());
             }};
    s.bench_case = [](const Shape& sh) {
      return OpCase{"bench", {in(sh), in({sh.back()}), in({sh.back()})}};
    };
    ops.push_back(s);
  }
  {
    OpSpec s{"embedding",
             "embedding, embedding_backward",
             {{"weight[10,4] idx[2,5]", {in({10, 4}), idx({2, 5}, 10)}}},
             [](const Inputs& x, const OpContext&) { return embedding(x[0], x[1]); }};
    s.bench_case = [](const Shape& sh) {
      TS_CHECK(sh.size() == 3, "embedding bench: --shape V,D,N");
      return OpCase{"bench", {in({sh[0], sh[1]}), idx({sh[2]}, sh[0])}};
    };
    ops.push_back(s);
  }
  {
    OpSpec s{"cross_entropy",
             "cross_entropy, cross_entropy_backward",
             {{"[6,5]", {in({6, 5}), idx({6}, 5)}},
              {"[2,4,5] ignore_index", {in({2, 4, 5}), idx({2, 4}, 5, InputKind::IndexOrIgnore)}},
              {"[6,5] label_smoothing 0.1", {in({6, 5}), idx({6}, 5)}, {}, true}},
             [](const Inputs& x, const OpContext& c) {
               return cross_entropy(x[0], x[1], -100, c.op_case.flag ? 0.1 : 0.0);
             }};
    s.bench_case = [](const Shape& sh) {
      TS_CHECK(sh.size() == 2, "cross_entropy bench: --shape N,C");
      return OpCase{"bench", {in(sh), idx({sh[0]}, sh[1])}};
    };
    ops.push_back(s);
  }
  {
    OpSpec s{"dropout",
             "dropout",
             {{"[40] p=0.3", {in({40})}}, {"[4,5]T p=0.5", {tin({4, 5})}, {}, true}},
             [](const Inputs& x, const OpContext& c) {
               Generator gen(42);  // same mask on every call, any dtype or device
               return dropout(x[0], c.op_case.flag ? 0.5 : 0.3, true, &gen);
             }};
    s.bench_case = [](const Shape& sh) { return elementwise_bench(sh, 1); };
    ops.push_back(s);
  }
  {
    OpSpec s{
        "attention",
        "attention, attention_backward",
        {{"[2,2,5,4]", {in({2, 2, 5, 4}), in({2, 2, 5, 4}), in({2, 2, 5, 4})}},
         {"[2,2,5,4] causal", {in({2, 2, 5, 4}), in({2, 2, 5, 4}), in({2, 2, 5, 4})}, {}, true},
         {"[2,2,5,4] padding mask",
          {in({2, 2, 5, 4}), in({2, 2, 5, 4}), in({2, 2, 5, 3}),
           in({2, 1, 5, 5}, InputKind::Mask)}},
         {"q[1,2,3,4] kv[1,2,6,4] causal",
          {in({1, 2, 3, 4}), in({1, 2, 6, 4}), in({1, 2, 6, 4})},
          {},
          true}},
        [](const Inputs& x, const OpContext& c) {
          return scaled_dot_product_attention(x[0], x[1], x[2], x.size() > 3 ? x[3] : Tensor(),
                                              c.op_case.flag);
        }};
    s.bench_case = [](const Shape& sh) {
      TS_CHECK(sh.size() == 4, "attention bench: --shape B,H,T,D");
      return OpCase{"bench", {in(sh), in(sh), in(sh)}, {}, true};
    };
    s.flops = [](const Shape& sh) {
      return 2.0 * sh[0] * sh[1] * sh[2] * sh[2] * sh[3];
    };  // causal fwd
    ops.push_back(s);
  }
  ops.push_back({"cat",
                 "copy",
                 {{"[2,3],[2,4] dim 1", {in({2, 3}), in({2, 4})}},
                  {"[2,3]T,[1,3] dim 0", {tin({3, 2}), in({1, 2})}}},
                 [](const Inputs& x, const OpContext&) {
                   return cat({x[0], x[1]}, x[0].dim() == 2 && x[0].shape()[1] == 3 ? 1 : 0);
                 }});
  ops.push_back({"stack",
                 "copy",
                 {{"[2,3],[2,3] dim 1", {in({2, 3}), in({2, 3})}}},
                 [](const Inputs& x, const OpContext&) {
                   return stack({x[0], x[1]}, 1);
                 }});
  ops.push_back({"split",
                 "copy",
                 {{"[5,4] sizes 2,3 dim 0", {in({5, 4})}}},
                 [](const Inputs& x, const OpContext&) {
                   auto p = split(x[0], std::vector<int64_t>{2, 3}, 0);
                   return cat({p[1], p[0]}, 0);
                 }});
  ops.push_back({"views",
                 "copy",
                 {{"[3,4,5] permute/narrow/select/expand/squeeze", {in({3, 4, 5})}}},
                 [](const Inputs& x, const OpContext&) {
                   Tensor t = x[0].permute({2, 0, 1}).narrow(0, 1, 3).select(2, 2);  // [3,3]
                   t = t.unsqueeze(0).expand({2, 3, 3}).contiguous().view({2, 9}).slice(1, 1, 9, 2);
                   return t.reshape({8}).squeeze();
                 }});
  {
    OpSpec s{"sum_squares",
             "sum_squares",
             {{"[3,4] [5] [2,3]T", {in({3, 4}), in({5}), tin({2, 3})}}},
             [](const Inputs& x, const OpContext&) { return sum_squares(x).to(x[0].dtype()); }};
    s.differentiable = false;
    ops.push_back(s);
  }
  // Optimizer updates, run as mixed precision does: on a float32 master copy of the parameter.
  for (const char* name : {"adamw_step", "sgd_step", "lamb_step"}) {
    OpSpec s{name,
             name,
             {{"p[5,3] g[5,3]", {in({5, 3}), in({5, 3})}}, {"p[40] g[40]", {in({40}), in({40})}}},
             [name = std::string(name)](const Inputs& x, const OpContext&) {
               const DType master =
                   x[0].dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
               Tensor p = x[0].to(master).detach().clone().requires_grad_(true);
               p.set_grad(x[1].to(master).contiguous());
               std::vector<optim::ParamGroup> groups{{{"p"}, {p}, 0.05, 0.01}};
               std::unique_ptr<optim::Optimizer> opt;
               if (name == "adamw_step")
                 opt = std::make_unique<optim::Adam>(groups);
               else if (name == "sgd_step")
                 opt = std::make_unique<optim::SGD>(groups, optim::SGDOptions{0.9, 0.0, true});
               else
                 opt = std::make_unique<optim::Lamb>(groups);
               opt->step();
               opt->step();
               return p.detach().to(x[0].dtype());
             }};
    s.differentiable = false;
    ops.push_back(s);
  }
  {
    OpSpec s{"arange", "arange", {{"0..7 step 0.5", {}}}, [](const Inputs&, const OpContext& c) {
               return arange(0, 7, 0.5, c.dtype, c.device);
             }};
    s.differentiable = false;
    ops.push_back(s);
    s = {"full", "fill", {{"[3,4] = 1.75", {}}}, [](const Inputs&, const OpContext& c) {
           return full({3, 4}, 1.75, c.dtype, c.device);
         }};
    s.differentiable = false;
    ops.push_back(s);
    s = {"rand", "uniform", {{"[1000] seed 7", {}}}, [](const Inputs&, const OpContext& c) {
           Generator gen(7);
           return rand({1000}, c.dtype, c.device, &gen);
         }};
    s.differentiable = false;
    s.exact_reference = true;
    ops.push_back(s);
    s.name = "randn";
    s.kernels = "normal";
    s.fn = [](const Inputs&, const OpContext& c) {
      Generator gen(7);
      return randn({1000}, c.dtype, c.device, &gen);
    };
    ops.push_back(s);
  }
  return ops;
}

Tensor make_input(const InputSpec& spec, Generator& gen) {
  Shape shape = spec.shape;
  if (spec.transposed) std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  Tensor t;
  const Tensor u = rand(shape, DType::Float64, Device::cpu(), &gen);
  switch (spec.kind) {
    case InputKind::Normal:
      t = randn(shape, DType::Float64, Device::cpu(), &gen);
      break;
    case InputKind::Positive:
      t = u * 1.5 + 0.5;
      break;
    case InputKind::AwayFromZero: {
      const Tensor sign = rand(shape, DType::Float64, Device::cpu(), &gen);
      t = where(lt(sign, scalar_tensor(0.5, DType::Float64)), -(u + 0.5), u + 0.5);
      break;
    }
    case InputKind::SmallInt:
      t = (u * 3.0).to(DType::Int64).to(DType::Float64);
      break;
    case InputKind::Index:
    case InputKind::IndexOrIgnore: {
      t = (u * static_cast<double>(spec.high)).to(DType::Int64);
      if (spec.kind == InputKind::IndexOrIgnore) {
        const Tensor drop = rand(shape, DType::Float64, Device::cpu(), &gen);
        t = where(lt(drop, scalar_tensor(0.25, DType::Float64)), full({}, -100, DType::Int64), t);
      }
      break;
    }
    case InputKind::Mask: {
      t = lt(u, scalar_tensor(0.7, DType::Float64));
      t.select(-1, 0).fill_(1.0);
      break;
    }
  }
  if (spec.transposed) t = t.transpose(-1, -2);
  return t;
}

}  // namespace

const std::vector<OpSpec>& op_catalog() {
  static const std::vector<OpSpec> catalog = build_catalog();
  return catalog;
}

const OpSpec* find_op(const std::string& name) {
  for (const OpSpec& s : op_catalog())
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<Tensor> make_inputs(const OpCase& c, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (const InputSpec& s : c.inputs) out.push_back(make_input(s, gen));
  return out;
}

bool is_float_input(const InputSpec& s) {
  return s.kind != InputKind::Index && s.kind != InputKind::IndexOrIgnore &&
         s.kind != InputKind::Mask;
}

}  // namespace tessera::testing
