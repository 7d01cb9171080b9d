// The op catalog: softmax, layer_norm, embedding, cross_entropy, dropout (and its fusion with a
// bias add and a residual add).
#include "catalog_builders.h"

namespace tessera::testing::catalog {

void add_nn_ops(std::vector<OpSpec>& ops) {
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
  {  // residual + dropout(x + bias): the transformer kernel's fused bias, dropout, residual
    OpSpec s{"bias_dropout_add",
             "bias_dropout_add, dropout",
             {{"[8,5] p=0.3", {in({8, 5}), in({5}), in({8, 5})}},
              {"[2,3,4] p=0.5", {in({2, 3, 4}), in({4}), in({2, 3, 4})}, {}, true}},
             [](const Inputs& x, const OpContext& c) {
               Generator gen(42);  // the mask dropout(x + bias) draws from the same generator
               return bias_dropout_add(x[0], x[1], x[2], c.op_case.flag ? 0.5 : 0.3, true, &gen);
             }};
    s.bench_case = [](const Shape& sh) {
      return OpCase{"bench", {in(sh), in({sh.back()}), in(sh)}};
    };
    ops.push_back(s);
  }
}

}  // namespace tessera::testing::catalog
