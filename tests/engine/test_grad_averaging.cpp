// DeepSpeed's gradient-averaging keys against hand computation, on 2 and 4 ranks (mpirun):
// communication_data_type, gradient_predivide_factor and prescale_gradients decide where the
// division by N happens and in which precision the sum is taken, which shows in the result
// when the sum overflows float16 or bfloat16 rounds the gradients away.
#include <doctest/doctest.h>

#include <cmath>

#include "skip.h"
#include "tessera/engine/engine.h"
#include "tessera/nn/module.h"
#include "tessera/ops.h"
#include "tessera/parallel/process_group.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

struct Weights : nn::Module {
  nn::Parameter w{this, "w", zeros({4})};
};

// Every rank's gradient of w is `g` (the same on every rank, so the exact average is g); returns
// the gradient the engine leaves after averaging (stage 0: in w.grad after backward; ZeRO-2:
// minus one SGD step of lr 1 from w = 0, unclipped).
double averaged(double g, int stage, const std::string& keys) {
  manual_seed(1);
  Weights m;
  const std::string cfg = R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0,
      "optimizer": {"type": "SGD", "params": {"lr": 1.0}},
      "zero_optimization": {"stage": )" +
                          std::to_string(stage) + "}" + keys + "}";
  auto engine = engine::initialize(m, io::TrainConfig::parse(cfg, parallel::world()->size()));
  engine->backward(sum(m.w.get() * g));
  if (stage == 0) return m.w.get().grad().to_vector()[0];
  engine->step();
  return -m.w.get().to_vector()[0];
}

}  // namespace

TEST_CASE("gradient averaging order and precision follow DeepSpeed's keys (hand-computed)" *
          test::skip_if(test::launched_world_size() < 2, "needs 2 or more ranks (mpirun)")) {
  const int n = parallel::world()->size();
  const std::string f = std::to_string(n);
  for (int stage : {0, 2}) {
    INFO("zero stage ", stage, " on ", n, " ranks");
    // 40000 is exact in float16; N of them sum past its largest finite value (65504).
    // Default (postscale, predivide 1): the float16 sum overflows before the division by N.
    // (ZeRO's step stops there: float32 training with an infinite gradient norm is an error.)
    if (stage == 0)
      CHECK(std::isinf(averaged(40000, stage, R"(, "communication_data_type": "fp16")")));
    else
      CHECK_THROWS_WITH_AS(averaged(40000, stage, R"(, "communication_data_type": "fp16")"),
                           doctest::Contains("gradient norm is inf"), Error);
    // gradient_predivide_factor N: each rank divides by N first, the sum is 40000 again.
    CHECK(averaged(40000, stage,
                   R"(, "communication_data_type": "fp16", "gradient_predivide_factor": )" + f) ==
          40000.0);
    // prescale_gradients: 1/N before the sum (DeepSpeed's ZeRO refuses it with reduce-scatter;
    // Tessera's ZeRO applies it).
    CHECK(averaged(40000, stage,
                   R"(, "communication_data_type": "fp16", "prescale_gradients": true)") ==
          40000.0);
    // In float32 the same gradients average exactly.
    CHECK(averaged(40000, stage, R"(, "communication_data_type": "fp32")") == 40000.0);
    // 1 + 2^-9 is below bfloat16's resolution at 1 (2^-7): reduced in bf16 it averages to 1.
    const double g = 1.0 + std::ldexp(1.0, -9);
    CHECK(averaged(g, stage, R"(, "communication_data_type": "bf16")") == 1.0);
    CHECK(averaged(g, stage, R"(, "communication_data_type": "fp32")") == g);
  }
}

TEST_SUITE_END();
