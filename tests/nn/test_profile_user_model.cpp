// The flops profiler on a user's own model through the C++ API: a submodule with its own
// forward signature opens a ModuleScope, a layer called through operator() is seen by
// itself, and what the model computes itself counts towards the model; type names are the
// classes' own.
#include <doctest/doctest.h>

#include "tessera/nn/flops_profiler.h"
#include "tessera/nn/layers.h"
#include "tessera/ops.h"

using namespace tessera;

namespace {

struct Pairs {
  Tensor x, y;  // [B, 3], [B, 1]
};

struct Block : nn::Module {
  using Module::Module;
  nn::Linear fc{this, "fc", 3, 8};
  Tensor forward(const Tensor& x, double gain) {
    nn::ModuleScope scope(*this);
    return relu(fc(x)) * gain;  // 24 MACs a row; relu and the product 8 FLOPs a row each
  }
};

struct ProfiledNet : nn::LossModel<Pairs> {
  Block block{this, "block"};
  nn::Linear head{this, "head", 8, 1};
  Tensor loss(const Pairs& b) override {
    const Tensor err = head(block.forward(b.x, 2.0)) - b.y;  // the model's own: 1 a row
    return sum(err * err);                                   // 1 a row (sum counts none)
  }
};

}  // namespace

TEST_CASE("flops profiler: a user model's modules, through get_model_profile") {
  manual_seed(1);
  ProfiledNet net;
  const int64_t B = 5;
  const Pairs batch{randn({B, 3}), randn({B, 1})};
  nn::FlopsProfileOptions o;
  o.top_modules = 2;
  const nn::ModelProfile p = nn::get_model_profile<Pairs>(net, batch, o);
  CHECK(p.macs == B * 3 * 8 + B * 8);
  CHECK(p.flops == 2 * B * 3 * 8 + 8 * B + 8 * B + 2 * B * 8 + B + B);
  CHECK(p.params == 3 * 8 + 8 + 8 + 1);
  CHECK(net.block.type_name() == "Block");
  CHECK(p.text.find("ProfiledNet(\n") != std::string::npos);
  CHECK(p.text.find("  (block): Block(\n") != std::string::npos);
  CHECK(p.text.find("    (fc): Linear(") != std::string::npos);
  CHECK(p.text.find("  (head): Linear(") != std::string::npos);
  CHECK(p.text.find("params      - {'Block': '32', 'Linear': '9'}") != std::string::npos);

  nn::FlopsProfiler prof(net);
  prof.start_profile();
  {
    nn::ModuleScope scope(net);
    net.loss(batch);
  }
  prof.stop_profile();
  CHECK(prof.figures(net.block).flops == 2 * B * 3 * 8 + 16 * B);
  CHECK(prof.figures(net.block.fc).macs == B * 3 * 8);
  CHECK(prof.figures(net.head).flops == 2 * B * 8);
  CHECK(prof.total_flops() - prof.figures(net.block).flops - prof.figures(net.head).flops ==
        2 * B);  // the loss, computed by the model itself
  // A module of another model is not this profiler's.
  ProfiledNet other;
  CHECK_THROWS_WITH_AS(prof.figures(other.head), doctest::Contains("'head' is not in the model"),
                       Error);
}
