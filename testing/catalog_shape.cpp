// The op catalog: joining, splitting and views.
#include "catalog_builders.h"

namespace tessera::testing::catalog {

void add_shape_ops(std::vector<OpSpec>& ops) {
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
}

}  // namespace tessera::testing::catalog
