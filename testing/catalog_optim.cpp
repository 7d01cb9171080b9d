// The op catalog: the gradient norm (sum_squares) and the optimizer updates.
#include "catalog_builders.h"
#include "tessera/optim/optimizer.h"

namespace tessera::testing::catalog {

void add_optim_ops(std::vector<OpSpec>& ops) {
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
                 // (the fixture's eps: generate_catalog_fixtures.py's lamb_two_steps)
                 opt = std::make_unique<optim::Lamb>(
                     groups, optim::LambOptions{0.9, 0.999, 1e-6, 10.0, 0.01});
               opt->step();
               opt->step();
               return p.detach().to(x[0].dtype());
             }};
    s.differentiable = false;
    ops.push_back(s);
  }
}

}  // namespace tessera::testing::catalog
