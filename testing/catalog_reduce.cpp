// The op catalog: reductions and argmax.
#include "catalog_builders.h"

namespace tessera::testing::catalog {

void add_reduce_ops(std::vector<OpSpec>& ops) {
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
}

}  // namespace tessera::testing::catalog
