// The op catalog: factories and random fills.
#include "catalog_builders.h"

namespace tessera::testing::catalog {

void add_creation_ops(std::vector<OpSpec>& ops) {
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
    s.device_ulps = 4;
    s.fn = [](const Inputs&, const OpContext& c) {
      Generator gen(7);
      return randn({1000}, c.dtype, c.device, &gen);
    };
    ops.push_back(s);
  }
}

}  // namespace tessera::testing::catalog
