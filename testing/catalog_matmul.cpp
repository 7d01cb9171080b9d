// The op catalog: matmul and linear.
#include "catalog_builders.h"

namespace tessera::testing::catalog {

void add_matmul_ops(std::vector<OpSpec>& ops) {
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
}

}  // namespace tessera::testing::catalog
