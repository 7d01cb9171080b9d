// The engine against PyTorch (tests/fixtures/generate_training_fixture.py), exact resume,
// fp16 loss scaling, and checkpoints that survive a kill mid-save.
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "fixture_util.h"
#include "skip.h"
#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tessera/parallel/zero_config.h"
#include "tiny_gpt.h"

using namespace tessera;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kDir = TESSERA_FIXTURES_DIR "/training/";

using test::read_json;
const auto ids = test::int_matrix;

std::string tmp_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("tessera-engine-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(d);
  return d.string();
}

const char* kConfig = R"({"train_batch_size": 2, "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 30, "warmup_num_steps": 5,
                "warmup_max_lr": 0.003}}})";

}  // namespace

TEST_CASE("ten AdamW steps match PyTorch to 1e-5 relative on every loss") {
  auto model = models::load_pretrained(kDir + "model");
  auto eng = engine::initialize(*model, io::TrainConfig::from_file(kDir + "config.json"));
  const json batches = read_json(kDir + "batches.json");
  const std::vector<double> want = read_json(kDir + "losses.json")["losses"];
  REQUIRE(batches.size() == want.size());
  double worst = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    const Tensor loss =
        eng->forward(models::Batch{ids(batches[k]["input_ids"]), ids(batches[k]["targets"])});
    eng->backward(loss);
    eng->step();
    INFO("step ", k, ": tessera ", loss.item(), ", pytorch ", want[k]);
    CHECK(std::fabs(loss.item() - want[k]) <= 1e-5 * std::fabs(want[k]));
    worst = std::max(worst, std::fabs(loss.item() - want[k]) / std::fabs(want[k]));
  }
  MESSAGE("ten AdamW steps vs PyTorch: worst relative loss difference " << worst);
}

TEST_CASE("gradient accumulation: two micro-batches of 1 step like one batch of 2") {
  auto run = [](const char* cfg, int64_t micro) {
    manual_seed(3);
    auto c = models::GPT2Config::named("tiny");
    c.dropout = 0.0;
    models::GPT2LMHeadModel m(c);
    auto e = engine::initialize(m, io::TrainConfig::parse(cfg));
    Generator g(9);
    const Tensor x = (rand({2, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
    const Tensor y = (rand({2, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
    for (int64_t i = 0; i < 2 / micro; ++i) {
      CHECK(e->is_gradient_accumulation_boundary() == (i == 2 / micro - 1));
      e->backward(
          e->forward(models::Batch{x.narrow(0, i * micro, micro), y.narrow(0, i * micro, micro)}));
      e->step();
    }
    CHECK(e->global_steps() == 1);
    return m.transformer.wte.weight.to_vector();
  };
  const auto a =
      run(R"({"train_batch_size": 2, "optimizer": {"type": "SGD", "params": {"lr": 0.5}}})", 2);
  const auto b = run(
      R"({"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "optimizer": {"type": "SGD", "params": {"lr": 0.5}}})",
      1);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  CHECK(worst < 1e-6);
}

TEST_CASE("resume is exact: N steps, save, load into a fresh engine, M more == N+M straight") {
  std::vector<double> straight;
  {
    test::TinyGpt s(kConfig, 5, 0.1);
    for (int k = 0; k < 8; ++k) straight.push_back(s.train_step(k));
  }
  const std::string dir = tmp_dir("resume");
  {
    test::TinyGpt s(kConfig, 5, 0.1);
    for (int k = 0; k < 4; ++k) CHECK(s.train_step(k) == straight[k]);
    s.engine->save_checkpoint(dir, "step4", {{"note", "hello"}});
  }
  manual_seed(999);  // the checkpoint restores the RNG that dropout draws from
  test::TinyGpt fresh(kConfig, 5, 0.1);
  const json client = fresh.engine->load_checkpoint(dir).client_state;
  CHECK(client["note"] == "hello");
  CHECK(fresh.engine->global_steps() == 4);
  for (int k = 4; k < 8; ++k) CHECK(fresh.train_step(k) == straight[k]);  // bit for bit
}

TEST_CASE("fp16: an overflow skips the step and halves the scale (DeepSpeed semantics)") {
  test::TinyGpt s(
      R"({"train_batch_size": 2, "fp16": {"enabled": true, "initial_scale_power": 8, "hysteresis": 1},
             "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})");
  CHECK(s.model->transformer.wte.weight.dtype() == DType::Float16);
  CHECK(s.engine->loss_scale() == 256.0);
  s.train_step(0);
  const auto before = s.model->transformer.wte.weight.to_vector();
  // A loss whose gradient overflows float16.
  const Tensor huge = sum(s.model->transformer.wte.weight.to(DType::Float32)) * 1e30;
  s.engine->backward(huge);
  const auto st = s.engine->step();
  CHECK(st.overflow);
  CHECK_FALSE(st.stepped);
  CHECK(s.engine->loss_scale() == 128.0);
  CHECK(s.engine->skipped_steps() == 1);
  CHECK(s.model->transformer.wte.weight.to_vector() == before);
  s.train_step(1);
  CHECK(s.engine->global_steps() == 3);
}

TEST_CASE("fp16: overflows the loss scale cannot explain stop the run (not skips forever)") {
  // Stage 0 keeps the scale at its minimum, as DeepSpeed's FP16_Optimizer: past
  // fp16.hysteresis overflows in a row there, the run has diverged.
  test::TinyGpt s(
      R"({"train_batch_size": 2, "fp16": {"enabled": true, "initial_scale_power": 1,
             "min_loss_scale": 1, "hysteresis": 2},
             "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})");
  auto overflow = [&] {
    const Tensor huge = sum(s.model->transformer.wte.weight.to(DType::Float32)) * 1e30;
    s.engine->backward(huge);
    return s.engine->step();
  };
  CHECK(overflow().overflow);  // at scale 2: the scale halves to 1, its minimum
  CHECK(s.engine->loss_scale() == 1.0);
  overflow();  // the first and second at the minimum: allowed (hysteresis 2)
  overflow();
  s.train_step(0);  // a clean step starts the count again
  overflow();
  overflow();
  CHECK_THROWS_WITH_AS(overflow(),
                       doctest::Contains("fp16 has skipped 3 steps in a row at the minimum loss "
                                         "scale 1, which cannot shrink further"),
                       Error);
  // A static scale cannot shrink at all: the same rule from the first overflow.
  test::TinyGpt st(R"({"train_batch_size": 2, "fp16": {"enabled": true, "loss_scale": 8,
             "hysteresis": 1}, "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})");
  const Tensor huge = sum(st.model->transformer.wte.weight.to(DType::Float32)) * 1e30;
  st.engine->backward(huge);
  CHECK(st.engine->step().overflow);
  const Tensor again = sum(st.model->transformer.wte.weight.to(DType::Float32)) * 1e30;
  st.engine->backward(again);
  CHECK_THROWS_WITH_AS(st.engine->step(), doctest::Contains("at the static loss scale 8"), Error);
}

TEST_CASE("bf16: 16-bit model, float32 master weights, and the loss goes down") {
  test::TinyGpt s(R"({"train_batch_size": 2, "bf16": {"enabled": true},
             "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}})");
  CHECK(s.model->transformer.wte.weight.dtype() == DType::BFloat16);
  Generator g(4);
  const Tensor x = (rand({2, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
  double first = 0, last = 0;
  for (int k = 0; k < 15; ++k) {
    const Tensor loss = s.engine->forward(models::Batch{x, x});
    s.engine->backward(loss);
    s.engine->step();
    (k == 0 ? first : last) = loss.item();
  }
  CHECK(std::isfinite(last));
  CHECK(last < first - 0.5);  // learns to copy its input
}

namespace {

// The GPT-2 tests/tools/checkpoint_writer.cpp trains (about 3.4M parameters, 40 MB of
// checkpoint, so that a save takes long enough to be seen in progress and killed there).
struct BigSetup {
  std::unique_ptr<models::GPT2LMHeadModel> model;
  std::unique_ptr<engine::Engine> engine;
  BigSetup() {
    manual_seed(9);
    auto c = models::GPT2Config::named("tiny");
    c.n_embd = 256;
    c.n_layer = 4;
    c.n_head = 4;
    model = std::make_unique<models::GPT2LMHeadModel>(c);
    engine = engine::initialize(
        *model,
        io::TrainConfig::parse(R"({"train_batch_size": 2, "optimizer": {"type": "AdamW"}})"));
  }
  void step(int64_t k) {
    Generator g(77 + static_cast<uint64_t>(k));
    const Tensor x = (rand({2, 8}, DType::Float32, Device::cpu(), &g) * 96.0).to(DType::Int64);
    engine->backward(engine->forward(models::Batch{x, x}));
    engine->step();
  }
  std::map<std::string, std::vector<double>> weights() const {
    std::map<std::string, std::vector<double>> w;
    for (auto& [n, t] : model->named_parameters()) w[n] = t->to_vector();
    return w;
  }
};

// Starts checkpoint-writer (trains `steps` steps, then saves `tag` into `dir` over and over)
// and kills it (SIGKILL) as soon as its first save's temporary directory exists. True when the
// kill landed mid-save: that directory is still there afterwards and `tag` was not
// (re)published.
bool kill_mid_save(const std::string& dir, const std::string& tag, int steps) {
  const fs::path published = fs::path(dir) / tag;
  const auto before =
      fs::exists(published) ? fs::last_write_time(published) : fs::file_time_type::min();
  const std::string steps_arg = std::to_string(steps);
  const char* argv[] = {TESSERA_CHECKPOINT_WRITER, dir.c_str(), tag.c_str(), steps_arg.c_str(),
                        nullptr};
  pid_t child = 0;
  REQUIRE(posix_spawn(&child, argv[0], nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  const fs::path tmp = fs::path(dir) / ("." + tag + ".tmp-" + std::to_string(child));
  for (int i = 0; i < 400000 && !fs::exists(tmp); ++i) usleep(50);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  const bool republished = fs::exists(published) && fs::last_write_time(published) != before;
  const bool mid_save = fs::exists(tmp) && !republished;
  fs::remove_all(tmp);
  return mid_save;
}

}  // namespace

TEST_CASE("a process killed mid-save leaves the previous checkpoint, loadable and unchanged") {
  // A new tag, and the tag `latest` already names (saved again in place).
  for (const std::string tag : {"next", "good"}) {
    INFO("saving tag ", tag, " when 'latest' names good");
    const std::string dir = tmp_dir("kill-" + tag);
    BigSetup s;
    s.step(0);
    s.engine->save_checkpoint(dir, "good");
    const auto good = s.weights();
    int proven = 0;
    const int wanted = test::sanitized() ? 1 : 2;  // (each proof is a whole save under ASan)
    for (int attempt = 0; attempt < 8 && proven < wanted; ++attempt) {
      if (!kill_mid_save(dir, tag, 2)) continue;
      ++proven;
      BigSetup reader;
      reader.engine->load_checkpoint(dir);  // whatever `latest` names must be complete
      CHECK(io::read_text_file(dir + "/latest") == "good");
      CHECK(reader.engine->global_steps() == 1);
      CHECK(reader.weights() == good);  // the previous checkpoint, bit for bit
    }
    CHECK_MESSAGE(proven >= 1, "no kill landed inside a save in 8 attempts");
    fs::remove_all(dir);
  }
}

TEST_CASE("bad configs stop with a message naming the key, the value and what is expected") {
  auto err = [](const std::string& text) {
    try {
      io::TrainConfig::parse(text, 1, "cfg.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(
      err(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2})")
          .find("batch sizes disagree: train_batch_size 8 != train_micro_batch_size_per_gpu 3 * "
                "gradient_accumulation_steps 2") != std::string::npos);
  CHECK(err(R"({"optimizer": {"type": "AdamW"}})")
            .find("set train_batch_size or train_micro_batch_size_per_gpu") != std::string::npos);
  CHECK(err(R"({"train_batch_size": "8"})")
            .find("'train_batch_size' must be an integer, found \"8\"") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 0})")
            .find("'train_batch_size' is 0, expected a positive integer") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 8, "optimizer": {"type": "Adagrad"}})")
            .find("'optimizer.type' is \"Adagrad\"") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 8, "optimizer": {"params": {"lr": -1}}})")
            .find("'optimizer.params.lr' is -1, expected >= 0") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 8, "optimizer": {"params": {"betas": [0.9]}}})")
            .find("'optimizer.params.betas' must be two numbers") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR", "params": {}}})")
            .find("'scheduler.params.total_num_steps' is required") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}})")
            .find("cannot both be true") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 8, "zero_optimization": {"stage": 4}})")
            .find("'zero_optimization.stage' is 4, expected 0, 1, 2 or 3") != std::string::npos);
  CHECK(
      err(R"({"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"device": "cpu"}}})")
          .find("'zero_optimization.offload_optimizer' needs ZeRO stage 1, 2 or 3") !=
      std::string::npos);
  CHECK(err(R"({"train_batch_size": 8, "gradient_clipping": -1})")
            .find("'gradient_clipping' is -1") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 8, "model": {"n_embd": 130, "n_head": 4}})")
            .find("'model.n_embd' (130) must be divisible by 'model.n_head' (4)") !=
        std::string::npos);
  CHECK(err(R"({"train_batch_size": 8,)").find("cfg.json: invalid JSON") != std::string::npos);
  // The rule's other directions, and world size.
  const auto c =
      io::TrainConfig::parse(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 4);
  CHECK(c.micro_batch_size == 4);
  CHECK(io::TrainConfig::parse(
            R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2})", 2)
            .train_batch_size == 12);
  // offload_optimizer.pin_memory: off by default, as in DeepSpeed; read when given.
  const char* offload = R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu"%s}}})";
  auto with = [&](const char* extra) {
    char text[256];
    std::snprintf(text, sizeof text, offload, extra);
    return parallel::zero_config(io::TrainConfig::parse(text));  // (a copy)
  };
  CHECK_FALSE(with("").offload_pin_memory);
  CHECK(with(R"(, "pin_memory": true)").offload_pin_memory);
  CHECK(with(R"(, "pin_memory": true)").offload_optimizer_device == "cpu");
  CHECK(err(R"({"train_batch_size": 8, "zero_optimization": {"stage": 1,
      "offload_optimizer": {"device": "cpu", "pin_memory": 3}}})")
            .find("pin_memory") != std::string::npos);
  // Unknown keys warn by name and nothing stops.
  const auto w = io::TrainConfig::parse(
      R"({"train_batch_size": 8, "optimizer": {"params": {"lr": 1, "foo": 2}}, "bar": 1})");
  REQUIRE(w.warnings.size() == 2);
  CHECK(w.warnings[0].find("'optimizer.params.foo'") != std::string::npos);
  CHECK(w.warnings[1].find("'bar'") != std::string::npos);
}

TEST_CASE("DeepSpeed's optimizer and scheduler rules from the config") {
  auto parse = [](const std::string& text) { return io::TrainConfig::parse(text, 1, "cfg.json"); };
  auto err = [&](const std::string& text) {
    try {
      parse(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto warned = [](const io::TrainConfig& c, const std::string& needle) {
    for (const auto& w : c.warnings)
      if (w.find(needle) != std::string::npos) return true;
    return false;
  };
  // "Adam" with weight_decay is decoupled (AdamW) unless adam_w_mode is false, as in DeepSpeed.
  // (The optimizer built from the config says which: "AdamW" decouples, "Adam" adds L2.)
  auto built = [](const io::TrainConfig& c) { return engine::make_optimizer(c, {})->name(); };
  CHECK(built(parse(R"({"train_batch_size": 1, "optimizer": {"type": "Adam"}})")) == "AdamW");
  CHECK(built(parse(R"({"train_batch_size": 1, "optimizer": {"type": "Adam",
                        "params": {"adam_w_mode": false}}})")) == "Adam");
  const auto adamw = parse(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW",
                              "params": {"adam_w_mode": false}}})");
  CHECK(built(adamw) == "AdamW");
  CHECK(warned(adamw, "always decoupled"));
  CHECK(err(R"({"train_batch_size": 1, "optimizer": {"params": {"max_grad_norm": 1}}})")
            .find("use the top-level 'gradient_clipping'") != std::string::npos);
  // OneCycle needs its bounds; rates and lrs are not negative; steps are positive integers.
  CHECK(err(R"({"train_batch_size": 1, "scheduler": {"type": "OneCycle",
                "params": {"cycle_max_lr": 0.1}}})")
            .find("'scheduler.params.cycle_min_lr' is required by OneCycle") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 1, "scheduler": {"type": "OneCycle", "params": {
                "cycle_min_lr": 0.1, "cycle_max_lr": 1, "decay_lr_rate": -0.5}}})")
            .find("'scheduler.params.decay_lr_rate' is -0.5, expected >= 0") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupLR", "params": {
                "warmup_max_lr": -1}}})")
            .find("'scheduler.params.warmup_max_lr' is -1, expected >= 0") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupLR", "params": {
                "warmup_num_steps": 2.5}}})")
            .find("'scheduler.params.warmup_num_steps' must be an integer") != std::string::npos);
  CHECK(err(R"({"train_batch_size": 1, "scheduler": {"type": "LRRangeTest", "params": {
                "lr_range_test_staircase": 1}}})")
            .find("must be true or false") != std::string::npos);
  // WarmupCosineLR with no decay window warns as DeepSpeed does, instead of refusing.
  CHECK(warned(parse(R"({"train_batch_size": 1, "scheduler": {"type": "WarmupCosineLR",
                         "params": {"total_num_steps": 5, "warmup_num_steps": 10}}})"),
               "is less than warmup_num_steps"));
  // Keys read but not acted on warn like unknown keys.
  const auto ignored = parse(R"({"train_batch_size": 1, "fp16": {"auto_cast": true},
      "zero_optimization": {"contiguous_gradients": true, "stage3_max_reuse_distance": 1e9,
                            "stage3_max_live_parameters": 1e9}, "checkpoint": {"tag_validation": "Fail"},
      "optimizer": {"params": {"torch_adam": true}}})");
  for (const char* k : {"'fp16.auto_cast'", "'zero_optimization.contiguous_gradients'",
                        "'checkpoint.tag_validation'", "'optimizer.params.torch_adam'"})
    CHECK_MESSAGE(warned(ignored, std::string(k) + " has no effect"), k);
  // ZeRO-3's coordinator keys and ZeRO-Infinity's offload_param act (tests/engine/
  // test_zero3_prefetch.cpp, tests/tools/nvme_offload.sh).
  for (const char* k : {"stage3_max_reuse_distance", "stage3_max_live_parameters"})
    CHECK_MESSAGE(!warned(ignored, k), k);
  const auto infinity = parse(R"({"train_batch_size": 1, "zero_optimization": {"stage": 3,
      "offload_param": {"device": "nvme", "nvme_path": "/tmp", "buffer_count": 5,
                        "buffer_size": 1e8, "max_in_cpu": 1e9, "pin_memory": true}}})");
  CHECK(infinity.warnings.empty());
  CHECK(warned(parse(R"({"train_batch_size": 1, "fp16": {"enabled": true, "hysteresis": 4}})"),
               "'fp16.hysteresis' has no effect at zero_optimization.stage 0"));
  CHECK_FALSE(warned(parse(R"({"train_batch_size": 1, "fp16": {"enabled": true, "hysteresis": 4},
                               "zero_optimization": {"stage": 1}})"),
                     "hysteresis"));
  CHECK(warned(parse(R"({"train_batch_size": 1, "train": {"checkpoint_interval": 10}})"),
               "'train.checkpoint_dir' is not"));
  CHECK(warned(parse(R"({"train_batch_size": 1, "model": {"size": "gpt2", "n_layer": 4}})"),
               "'model.n_layer' has no effect with 'model.size'"));
  // (Keys a model type does not read: the model registry's, tests/launch/test_toy_model.cpp.)
}

TEST_CASE("weight decay skips vectors by default; weight_decay_1d decays them too") {
  for (bool decay_1d : {false, true}) {
    manual_seed(2);
    auto model = models::GPT2LMHeadModel(models::GPT2Config::named("tiny"));
    const std::string cfg = std::string(R"({"train_batch_size": 1, "optimizer": {"type": "AdamW",
        "params": {"lr": 0.0, "weight_decay": 0.5, "weight_decay_1d": )") +
                            (decay_1d ? "true" : "false") + "}}}";
    auto engine = engine::initialize(model, io::TrainConfig::parse(cfg));
    for (const auto& g : engine->optimizer().groups())
      for (size_t i = 0; i < g.params.size(); ++i)
        CHECK_MESSAGE(g.weight_decay == (decay_1d || g.params[i].dim() >= 2 ? 0.5 : 0.0),
                      g.names[i]);
  }
}

TEST_CASE("fp16: NaN weights stop training with the step named, not an endless skip") {
  test::TinyGpt s(R"({"train_batch_size": 2, "fp16": {"enabled": true, "initial_scale_power": 4},
             "optimizer": {"type": "AdamW", "params": {"lr": 0.001}}})");
  s.train_step(0);
  {
    NoGradGuard no_grad;  // as a diverged update would leave them
    s.engine->optimizer().groups()[0].params[0].fill_(NAN);
    s.model->transformer.wte.weight.fill_(NAN);
  }
  CHECK_THROWS_WITH_AS(s.train_step(1), doctest::Contains("global step 1: the weights hold NaN"),
                       Error);
}

TEST_CASE("a save that fails partway leaves nothing behind and the previous checkpoint latest") {
  const std::string dir = tmp_dir("failed-save");
  test::TinyGpt s(kConfig, 5, 0.1);
  s.train_step(0);
  s.engine->save_checkpoint(dir, "good");
  s.train_step(1);
  // An extra file whose directory would be a file already written: the write fails inside
  // the temporary directory, after the weights went in.
  CHECK_THROWS(s.engine->save_checkpoint(dir, "next", {}, true, {{"model.safetensors/x", "y"}}));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"good", "latest"});
  CHECK(io::read_text_file(dir + "/latest") == "good");
  fs::remove_all(dir);
}
