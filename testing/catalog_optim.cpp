// The op catalog: the gradient norm (sum_squares), the optimizer updates, ZeRO++'s block
// quantization and FP8 casts.
#include "catalog_builders.h"
#include "tessera/autograd/fp8_linear.h"
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
  // Block quantization, round trip: the values each block's codes and scale stand for.
  for (const int64_t bits : {8, 4}) {
    const std::string name = "quantize_blocks_" + std::to_string(bits);
    OpSpec s{name,
             "quantize_blocks dequantize_blocks",
             {{"[40] block 8", {in({40})}},
              {"[5,3] block 8", {in({5, 3})}},
              {"[2,24] 2 segments, block 16", {in({2, 24})}}},
             [bits](const Inputs& x, const OpContext& c) {
               const int64_t segments =
                   c.op_case.label.find("2 segments") != std::string::npos ? 2 : 1;
               const int64_t block = c.op_case.label.find("block 16") != std::string::npos ? 16 : 8;
               Tensor out = Tensor::empty(x[0].shape(), x[0].dtype(), x[0].device());
               dequantize_blocks_into(out, quantize_blocks(x[0], segments, block, bits), segments,
                                      block, bits);
               return out;
             }};
    s.differentiable = false;
    ops.push_back(s);
  }
  // FP8 casts (tessera/fp8.h): the FP8 numbers of x * scale. Power-of-two scales keep x * scale
  // exact in float32, so a 16-bit input's numbers are its float64 rounding's.
  for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const char* name = format == Fp8Format::E4M3 ? "fp8_cast_e4m3" : "fp8_cast_e5m2";
    OpSpec s{name,
             "fp8_cast",
             {{"[40] scale 8", {in({40})}},
              {"[6,7] scale 256 (saturates)", {in({6, 7})}},
              {"[64] scale 2^-14 (subnormals)", {in({64})}}},
             [format](const Inputs& x, const OpContext& c) {
               const std::string& l = c.op_case.label;
               const float scale = l.find("256") != std::string::npos     ? 256.0f
                                   : l.find("2^-14") != std::string::npos ? 0x1p-14f
                                                                          : 8.0f;
               return fp8_cast(x[0], scale, format);
             }};
    s.differentiable = false;
    s.finite_differences = false;
    ops.push_back(s);
  }
}

}  // namespace tessera::testing::catalog
