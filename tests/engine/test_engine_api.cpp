// The engine's step-level API with DeepSpeed's semantics (deepspeed/runtime/engine.py,
// 0.19.8): the accumulation boundary and its override, backward's options and return value,
// zero_grad, train/eval, get_lr, get_global_grad_norm. Expected values are derived from
// DeepSpeed's code as cited, or computed in float64 from the gradients.
#include <doctest/doctest.h>

#include <cmath>
#include <iostream>
#include <sstream>

#include "tessera/engine/engine.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tiny_gpt.h"

using namespace tessera;

namespace {

// One sequence per micro-batch, so a window of 3 is 3 micro-batches.
struct EngineRun : test::TinyGpt {
  using TinyGpt::TinyGpt;
  Tensor loss(int64_t k) { return TinyGpt::loss(k, 1); }
};

// Three micro-batches of 1 per step.
const char* kGas3 = R"({"train_batch_size": 3, "train_micro_batch_size_per_gpu": 1,
  "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})";

}  // namespace

TEST_CASE(
    "is_gradient_accumulation_boundary: (micro_steps + 1) % gas == 0, micro_steps counted by "
    "step()") {
  EngineRun s(kGas3);
  // engine.py: is_gradient_accumulation_boundary() and step()'s `self.micro_steps += 1`.
  const bool want[] = {false, false, true, false, false, true, false};
  for (int k = 0; k < 7; ++k) {
    CAPTURE(k);
    CHECK(s.engine->is_gradient_accumulation_boundary() == want[k]);  // before forward
    s.engine->backward(s.loss(k));
    CHECK(s.engine->is_gradient_accumulation_boundary() == want[k]);  // between backward, step
    const engine::StepStats st = s.engine->step();
    CHECK(st.stepped == want[k]);
    CHECK(s.engine->micro_steps() == k + 1);
  }
  CHECK(s.engine->global_steps() == 2);
}

TEST_CASE("a loop with gas backwards and one step() is warned about once") {
  EngineRun s(kGas3);
  std::ostringstream captured;
  std::streambuf* old = std::cerr.rdbuf(captured.rdbuf());
  for (int k = 0; k < 6; ++k) s.engine->backward(s.loss(k));
  s.engine->step();
  std::cerr.rdbuf(old);
  const std::string text = captured.str();
  CHECK(text.find("a second backward before step() (micro-step 0)") != std::string::npos);
  CHECK(text.find("warning") == text.rfind("warning"));  // once
  CHECK(s.engine->global_steps() == 0);                  // micro-step 0 of 3: no update
}

TEST_CASE(
    "set_gradient_accumulation_boundary: false, false, true, then one step() == three counted "
    "micro-steps") {
  EngineRun counted(kGas3), manual(kGas3);
  for (int k = 0; k < 3; ++k) {
    counted.engine->backward(counted.loss(k));
    counted.engine->step();
  }
  for (int k = 0; k < 3; ++k) {
    manual.engine->set_gradient_accumulation_boundary(k == 2);
    CHECK(manual.engine->is_gradient_accumulation_boundary() == (k == 2));
    manual.engine->backward(manual.loss(k));
  }
  CHECK(manual.engine->step().stepped);
  CHECK(manual.engine->global_steps() == 1);
  CHECK(manual.weights() == counted.weights());
}

TEST_CASE("backward: returns loss / gas; scale_wrt_gas = false and retain_graph") {
  EngineRun scaled(kGas3), unscaled(kGas3);
  const Tensor loss = scaled.loss(0);
  const Tensor returned = scaled.engine->backward(loss);
  CHECK(returned.item() == static_cast<float>(loss.item() / 3.0));
  CHECK_FALSE(returned.requires_grad());
  const Tensor loss2 = unscaled.loss(0);
  CHECK(unscaled.engine->backward(loss2, {.scale_wrt_gas = false}).item() == loss2.item());
  // The same loss without the 1/3: the gradients are 3x, to float32 rounding (relative to
  // the largest gradient: entries near 0 come out of sums that cancel).
  const auto a = scaled.grads(), b = unscaled.grads();
  double worst = 0, largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(3.0 * a[i] - b[i]));
    largest = std::max(largest, std::fabs(b[i]));
  }
  worst /= largest;
  CHECK(worst < 1e-5);

  EngineRun twice(
      R"({"train_batch_size": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})");
  const Tensor l = twice.loss(0);
  twice.engine->backward(l, {.retain_graph = true});
  const auto once = twice.grads();
  twice.engine->backward(l);  // the graph is still there: gradients add up to 2x
  const auto doubled = twice.grads();
  for (size_t i = 0; i < once.size(); ++i) CHECK(doubled[i] == 2 * once[i]);
  CHECK_THROWS_WITH_AS(twice.engine->backward(full({}, 1.0)),
                       doctest::Contains("does not require grad"), Error);
}

TEST_CASE("zero_grad drops the window's gradients") {
  const char* cfg =
      R"({"train_batch_size": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})";
  EngineRun a(cfg), b(cfg);
  a.engine->backward(a.loss(0));
  a.engine->zero_grad();
  a.engine->backward(a.loss(1));
  a.engine->step();
  b.engine->backward(b.loss(1));
  b.engine->step();
  CHECK(a.weights() == b.weights());
}

TEST_CASE("get_global_grad_norm: the pre-clipping norm of the last step, in float64") {
  EngineRun s(R"({"train_batch_size": 1, "gradient_clipping": 0.5,
              "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})");
  CHECK_FALSE(s.engine->get_global_grad_norm().has_value());
  s.engine->backward(s.loss(0));
  double sq = 0;
  for (double g : s.grads()) sq += g * g;
  s.engine->step();
  REQUIRE(s.engine->get_global_grad_norm().has_value());
  CHECK(*s.engine->get_global_grad_norm() == doctest::Approx(std::sqrt(sq)).epsilon(1e-6));
  CHECK(std::sqrt(sq) > 0.5);  // so clipping happened after the norm was taken

  EngineRun plain(R"({"train_batch_size": 1, "gradient_clipping": 0,
      "optimizer": {"type": "SGD", "params": {"lr": 0.1}}})");
  plain.engine->backward(plain.loss(0));
  plain.engine->step();
  CHECK_FALSE(plain.engine->get_global_grad_norm().has_value());  // not computed, as DeepSpeed
}

TEST_CASE("train/eval and get_lr") {
  EngineRun s(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
              "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.001,
                            "warmup_max_lr": 0.01, "warmup_num_steps": 4}}})");
  s.engine->eval();
  CHECK_FALSE(s.model->is_training());
  s.engine->train();
  CHECK(s.model->is_training());
  // One lr per parameter group, all on the schedule: step 0 is warmup_min_lr.
  const std::vector<double> lrs = s.engine->get_lr();
  CHECK(lrs.size() == s.engine->optimizer().groups().size());
  for (double lr : lrs) CHECK(lr == 0.001);
}

TEST_CASE("several engines in one process train independently") {
  // Two models with their own configs (stage 0 with accumulation; bf16 ZeRO-2 with
  // clipping), their micro-steps interleaved, give what each gives alone.
  const char* cfg_a = kGas3;
  const char* cfg_b = R"({"train_batch_size": 1, "bf16": {"enabled": true},
    "zero_optimization": {"stage": 2}, "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}})";
  auto run_alone = [](const char* cfg) {
    EngineRun s(cfg);
    for (int k = 0; k < 6; ++k) {
      s.engine->backward(s.loss(k));
      s.engine->step();
    }
    return s.weights();
  };
  const auto alone_a = run_alone(cfg_a), alone_b = run_alone(cfg_b);
  EngineRun a(cfg_a), b(cfg_b);
  for (int k = 0; k < 6; ++k) {
    a.engine->backward(a.loss(k));
    b.engine->backward(b.loss(k));
    b.engine->step();
    a.engine->step();
  }
  CHECK(a.weights() == alone_a);
  CHECK(b.weights() == alone_b);
  CHECK(a.engine->global_steps() == 2);
  CHECK(b.engine->global_steps() == 6);
}
