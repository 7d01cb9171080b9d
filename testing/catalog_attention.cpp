// The op catalog: scaled dot-product attention and block-sparse attention.
#include "catalog_builders.h"

namespace tessera::testing::catalog {

void add_attention_ops(std::vector<OpSpec>& ops) {
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
  {
    // 8 tokens in blocks of 2: each head's 4 x 4 layout drawn at random (rows with no block
    // included: their output is 0).
    const InputSpec layout{{2, 4, 4}, InputKind::Index, 2};
    OpSpec s{"block_sparse_attention",
             "block_sparse_attention, block_sparse_attention_backward",
             {{"[2,2,8,4]", {in({2, 2, 8, 4}), in({2, 2, 8, 4}), in({2, 2, 8, 4}), layout}},
              {"[2,2,8,4] causal",
               {in({2, 2, 8, 4}), in({2, 2, 8, 4}), in({2, 2, 8, 4}), layout},
               {},
               true},
              {"[2,2,8,4] v[2,2,8,3] key padding",
               {in({2, 2, 8, 4}), in({2, 2, 8, 4}), in({2, 2, 8, 3}), layout,
                in({2, 8}, InputKind::Mask)}}},
             [](const Inputs& x, const OpContext& c) {
               return block_sparse_attention(x[0], x[1], x[2], x[3], x.size() > 4 ? x[4] : Tensor(),
                                             c.op_case.flag);
             }};
    ops.push_back(s);
  }
}

}  // namespace tessera::testing::catalog
