// Private to testing/: the helpers the catalog's op families are written with, and the
// function each family file (testing/catalog_<family>.cpp) defines.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tessera/grad_mode.h"
#include "tessera/op_catalog.h"
#include "tessera/ops.h"

namespace tessera::testing::catalog {

using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&, const OpContext&)>;

inline InputSpec in(Shape s, InputKind k = InputKind::Normal) {
  return {std::move(s), k};
}
inline InputSpec tin(Shape s) {
  return {std::move(s), InputKind::Normal, 0, true};
}
inline InputSpec idx(Shape s, int64_t high, InputKind k = InputKind::Index) {
  return {std::move(s), k, high, false, false};
}

inline OpCase elementwise_bench(const Shape& s, int arity) {
  OpCase c{"bench", {}};
  for (int i = 0; i < arity; ++i) c.inputs.push_back(in(s.empty() ? Shape{1 << 20} : s));
  return c;
}

inline std::vector<OpCase> unary_cases(InputKind k = InputKind::Normal) {
  return {{"[7]", {in({7}, k)}},
          {"[3,5]", {in({3, 5}, k)}},
          {"[5,3] transposed", {{{5, 3}, k, 0, true}}},
          {"[]", {in({}, k)}}};
}

inline std::vector<OpCase> binary_cases(InputKind kb = InputKind::Normal) {
  return {{"[3,4]+[3,4]", {in({3, 4}), in({3, 4}, kb)}},
          {"[3,1,4]+[5,1] broadcast", {in({3, 1, 4}), in({5, 1}, kb)}},
          {"[3,4]T+[3,4]", {tin({3, 4}), in({3, 4}, kb)}},
          {"[]+[2,3]", {in({}), in({2, 3}, kb)}}};
}

inline OpSpec unary(const std::string& name, Tensor (*f)(const Tensor&),
                    InputKind k = InputKind::Normal) {
  OpSpec s{name, name, unary_cases(k), [f](const Inputs& x, const OpContext&) { return f(x[0]); }};
  s.bench_case = [k](const Shape& sh) {
    OpCase c = elementwise_bench(sh, 1);
    c.inputs[0].kind = k;
    return c;
  };
  return s;
}

inline OpSpec binary(const std::string& name, Tensor (*f)(const Tensor&, const Tensor&),
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

inline OpSpec compare_op(const std::string& name, Tensor (*f)(const Tensor&, const Tensor&)) {
  OpSpec s = binary(name, f, InputKind::SmallInt, false);
  for (auto& c : s.cases) c.inputs[0].kind = InputKind::SmallInt;
  return s;
}

inline OpSpec reduction(const std::string& name,
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

// One function per op family, mirroring autograd/ops_<family>.cpp.
void add_elementwise_ops(std::vector<OpSpec>& ops);  // unary, binary, comparisons, casts, copies
void add_reduce_ops(std::vector<OpSpec>& ops);       // reductions and argmax
void add_matmul_ops(std::vector<OpSpec>& ops);       // matmul and linear
void add_nn_ops(std::vector<OpSpec>& ops);           // softmax ... dropout
void add_attention_ops(std::vector<OpSpec>& ops);    // scaled dot-product attention
void add_shape_ops(std::vector<OpSpec>& ops);        // joining, splitting and views
void add_optim_ops(std::vector<OpSpec>& ops);        // sum_squares and the optimizer updates
void add_creation_ops(std::vector<OpSpec>& ops);     // factories and random fills

}  // namespace tessera::testing::catalog
