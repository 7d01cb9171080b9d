// DeepSpeed as the oracle: replays what DeepSpeed's own classes computed
// (tests/fixtures/generate_deepspeed_fixtures.py -> tests/fixtures/deepspeed/*.json) through
// Tessera's config parser, schedules, engine and loss scaler.
#include <doctest/doctest.h>

#include <cmath>

#include "fixture_util.h"
#include "tessera/engine/engine.h"
#include "tessera/error.h"
#include "tessera/nn/layers.h"
#include "tessera/ops.h"

using namespace tessera;
using json = nlohmann::json;

namespace {

const std::string kDir = TESSERA_FIXTURES_DIR "/deepspeed/";

void check_close(double got, double want, const std::string& what) {
  const double tol = 1e-12 * std::max(1.0, std::fabs(want)) + 1e-18;
  CHECK_MESSAGE(std::fabs(got - want) <= tol,
                what << ": Tessera " << got << ", DeepSpeed " << want);
}

bool warned(const io::TrainConfig& c, const std::string& needle) {
  for (const auto& w : c.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

struct TinyModel : nn::Module {
  nn::Linear fc{this, "fc", 3, 2};
};

}  // namespace

TEST_CASE("DeepSpeed fixtures record the version they came from") {
  for (const char* f : {"schedules.json", "loss_scale.json", "batch.json"}) {
    const json j = test::read_json(kDir + f);
    CHECK(j["deepspeed"].get<std::string>().size() > 0);
    CHECK(j["cases"].size() > 0);
  }
}

TEST_CASE("every schedule gives each optimizer step DeepSpeed's lr and betas") {
  const json fx = test::read_json(kDir + "schedules.json");
  for (const json& c : fx["cases"]) {
    const std::string name = c["name"];
    INFO("schedule case: ", name, " (DeepSpeed ", fx["deepspeed"].get<std::string>(), ")");
    const io::TrainConfig cfg = io::TrainConfig::parse(c["config"].dump(), 1, name);
    const auto schedule = engine::make_schedule(cfg);
    const auto& lrs = c["lr"];
    for (size_t k = 0; k < lrs.size(); ++k)
      check_close(schedule->lr(static_cast<int64_t>(k)), lrs[k].get<double>(),
                  name + " lr at step " + std::to_string(k));
    if (c.contains("beta1")) {
      for (size_t k = 0; k < c["beta1"].size(); ++k) {
        const auto b = schedule->betas(static_cast<int64_t>(k));
        const auto fixed = engine::make_optimizer(cfg, {})->betas();  // the optimizer's own
        const double b1 = b ? b->first : fixed->first, b2 = b ? b->second : fixed->second;
        check_close(b1, c["beta1"][k].get<double>(), name + " beta1 at step " + std::to_string(k));
        check_close(b2, c["beta2"][k].get<double>(), name + " beta2 at step " + std::to_string(k));
      }
    } else {
      CHECK_MESSAGE(!schedule->betas(1), "DeepSpeed cycles no betas here (SGD)");
    }
    // What DeepSpeed warns about, Tessera's parser warns about too.
    for (const json& w : c["deepspeed_warnings"]) {
      const std::string msg = w;
      if (msg.find("is less than warmup_num_steps") != std::string::npos)
        CHECK_MESSAGE(warned(cfg, "is less than warmup_num_steps"), msg);
      if (msg.find("cycle_momentum is disabled") != std::string::npos)
        CHECK_MESSAGE(warned(cfg, "cycle_momentum is disabled"), msg);
    }
  }
}

TEST_CASE("the engine hands each optimizer step DeepSpeed's lr and betas") {
  const json fx = test::read_json(kDir + "schedules.json");
  int replayed = 0;
  for (const json& c : fx["cases"]) {
    const std::string name = c["name"];
    if (c["config"]["optimizer"]["type"] == "SGD") continue;
    INFO("schedule case: ", name);
    manual_seed(3);
    TinyModel model;
    auto engine = engine::initialize(model, io::TrainConfig::parse(c["config"].dump(), 1, name));
    const Tensor x = randn({1, 3});
    for (size_t k = 0; k < c["lr"].size(); ++k) {
      engine->backward(sum(model.fc(x)));
      if (c["beta1"][k].get<double>() >= 1.0) {
        // DeepSpeed's momentum decay has no bound and would hand Adam beta1 >= 1; Tessera
        // stops there with the cause.
        CHECK_THROWS_WITH_AS(engine->step(), doctest::Contains("decay_mom_rate"), Error);
        break;
      }
      const engine::StepStats st = engine->step();
      REQUIRE(st.stepped);
      check_close(st.lr, c["lr"][k].get<double>(),
                  name + " engine lr at step " + std::to_string(k));
      check_close(engine->optimizer().lr(), c["lr"][k].get<double>(), name + " optimizer lr");
      const auto betas = engine->optimizer().betas();
      REQUIRE(betas);
      check_close(betas->first, c["beta1"][k].get<double>(), name + " optimizer beta1");
      check_close(betas->second, c["beta2"][k].get<double>(), name + " optimizer beta2");
    }
    ++replayed;
  }
  CHECK(replayed >= 10);
}

TEST_CASE("fp16 loss scale follows DeepSpeed over overflow patterns (ZeRO and stage 0)") {
  const json fx = test::read_json(kDir + "loss_scale.json");
  for (const json& c : fx["cases"]) {
    const json& f = c["fp16"];
    for (const char* rule_name : {"zero", "stage0"}) {
      INFO("fp16 ", f.dump(), " pattern '", c["pattern"].get<std::string>(), "' rule ", rule_name);
      const auto rule = std::string(rule_name) == "zero" ? engine::LossScaleRule::ZeroDynamic
                                                         : engine::LossScaleRule::FusedOptimizer;
      engine::LossScaler s(true, std::pow(2.0, f["initial_scale_power"].get<double>()),
                           f["loss_scale_window"], f["hysteresis"], f["consecutive_hysteresis"],
                           f["min_loss_scale"], rule);
      const json& want = c[rule_name];
      const auto& pattern = c["overflow"];
      const size_t stop =
          want.contains("error_at") ? want["error_at"].get<size_t>() : pattern.size();
      REQUIRE(want["scale"].size() == stop);
      for (size_t i = 0; i < stop; ++i) {
        s.update(pattern[i].get<int>() != 0);
        CHECK_MESSAGE(s.scale() == want["scale"][i].get<double>(), "after step " << i);
      }
      if (want.contains("error_at"))  // DeepSpeed ends the run: so does Tessera
        CHECK_THROWS_WITH_AS(s.update(pattern[stop].get<int>() != 0),
                             doctest::Contains("minimum loss scale"), Error);
    }
  }
}

TEST_CASE("the batch-size triple resolves and is rejected as DeepSpeed's") {
  const json fx = test::read_json(kDir + "batch.json");
  for (const json& c : fx["cases"]) {
    const int64_t world = c["world_size"];
    INFO("given ", c["given"].dump(), " at world size ", world);
    if (c.contains("resolved")) {
      const auto cfg = io::TrainConfig::parse(c["given"].dump(), world);
      CHECK(cfg.train_batch_size == c["resolved"][0].get<int64_t>());
      CHECK(cfg.micro_batch_size == c["resolved"][1].get<int64_t>());
      CHECK(cfg.gradient_accumulation_steps == c["resolved"][2].get<int64_t>());
    } else {
      CHECK_THROWS_AS(io::TrainConfig::parse(c["given"].dump(), world), Error);
    }
  }
}
