// The checkpoint API with DeepSpeed's signatures and semantics (deepspeed/runtime/engine.py,
// 0.19.8): save_checkpoint's default tag and save_latest, load_checkpoint's options and its
// (path, client_state), save_16bit_model. Expected values come from the semantics: what a
// flag restores equals what was saved, what it leaves alone equals the fresh engine's.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "tessera/engine/engine.h"
#include "tessera/io/files.h"
#include "tessera/io/safetensors.h"
#include "tessera/models/gpt2.h"
#include "tessera/ops.h"
#include "tiny_gpt.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

std::string checkpoint_dir(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("tessera-ckpt-api-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(d);
  return d.string();
}

// AdamW with a warm-up: the schedule's step-0 lr is warmup_min_lr = 0 (DeepSpeed's
// WarmupDecayLR), so "schedule restored" and "schedule fresh" differ.
const char* kCheckpointConfig = R"({"train_batch_size": 2,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1}},
  "scheduler": {"type": "WarmupDecayLR", "params": {"total_num_steps": 30, "warmup_num_steps": 5,
                "warmup_max_lr": 0.003}}})";

using Setup = test::TinyGpt;

std::map<std::string, std::vector<double>> saved_weights(const std::string& tag_dir) {
  std::map<std::string, std::vector<double>> out;
  for (auto& [name, t] : io::load_safetensors(tag_dir + "/model.safetensors"))
    out[name] = t.to_vector();
  return out;
}

// A checkpoint of 4 steps of Setup(kCheckpointConfig, 5), with client_state {"epoch": 2}.
std::string four_steps(const std::string& name, double* lr_at_save = nullptr) {
  const std::string dir = checkpoint_dir(name);
  Setup s(kCheckpointConfig, 5);
  for (int k = 0; k < 4; ++k) s.train_step(k);
  s.engine->save_checkpoint(dir, "step4", {{"epoch", 2}});
  if (lr_at_save) *lr_at_save = s.engine->lr();
  return dir;
}

}  // namespace

TEST_CASE("save_checkpoint: the default tag is global_step<N>; save_latest = false keeps latest") {
  const std::string dir = checkpoint_dir("tags");
  Setup s(kCheckpointConfig, 5);
  for (int k = 0; k < 3; ++k) s.train_step(k);
  s.engine->save_checkpoint(dir);
  CHECK(fs::is_directory(dir + "/global_step3"));
  CHECK(io::read_text_file(dir + "/latest") == "global_step3");
  for (int k = 3; k < 5; ++k) s.train_step(k);
  s.engine->save_checkpoint(dir, "", {{"at", 5}}, /*save_latest=*/false);
  CHECK(fs::is_directory(dir + "/global_step5"));
  CHECK(io::read_text_file(dir + "/latest") == "global_step3");

  Setup r(kCheckpointConfig, 9);
  const engine::LoadedCheckpoint latest = r.engine->load_checkpoint(dir);
  CHECK(latest.path == (fs::path(dir) / "global_step3").string());
  CHECK(r.engine->global_steps() == 3);
  const engine::LoadedCheckpoint named = r.engine->load_checkpoint(dir, "global_step5");
  CHECK(named.path == (fs::path(dir) / "global_step5").string());
  CHECK(named.client_state == nlohmann::json{{"at", 5}});
  CHECK(r.engine->global_steps() == 5);
  CHECK_THROWS_WITH_AS(s.engine->save_checkpoint(dir, "latest"),
                       doctest::Contains("invalid tag 'latest'"), Error);
  CHECK_THROWS_WITH_AS(s.engine->save_checkpoint(""), doctest::Contains("non-empty path"), Error);
  fs::remove_all(dir);
}

TEST_CASE("load_module_only: the weights alone, as a warm start") {
  const std::string dir = four_steps("module-only");
  Setup fresh(kCheckpointConfig, 9);
  const GeneratorState rng = default_generator().state();
  const engine::LoadedCheckpoint got =
      fresh.engine->load_checkpoint(dir, "", {.load_module_only = true});
  CHECK(got.client_state == nlohmann::json{{"epoch", 2}});
  CHECK(fresh.weights() == saved_weights(got.path));
  CHECK(fresh.engine->global_steps() == 0);  // as DeepSpeed: steps are not restored
  CHECK(fresh.engine->lr() == 0.0);          // the schedule is at its start
  CHECK(fresh.engine->optimizer().step_count() == 0);
  CHECK(fresh.engine->optimizer().state_dict().size() == 1);  // "step" only: no moments
  CHECK(default_generator().state().offset == rng.offset);

  // Training on equals a fresh engine whose model starts from those weights.
  Setup warm(kCheckpointConfig, 9, 0.0, got.path + "/model.safetensors");
  for (int k = 0; k < 7; ++k) CHECK(fresh.train_step(k) == warm.train_step(k));
  CHECK(fresh.weights() == warm.weights());
  fs::remove_all(dir);
}

TEST_CASE("load_optimizer_states = false: fresh moments; steps and schedule come back") {
  double lr_at_save = 0;
  const std::string dir = four_steps("no-optimizer", &lr_at_save);
  Setup fresh(kCheckpointConfig, 9);
  fresh.engine->load_checkpoint(dir, "step4", {.load_optimizer_states = false});
  CHECK(fresh.weights() == saved_weights(dir + "/step4"));
  CHECK(fresh.engine->global_steps() == 4);
  CHECK(fresh.engine->lr() == lr_at_save);
  CHECK(lr_at_save > 0);
  CHECK(fresh.engine->optimizer().step_count() == 0);
  CHECK(fresh.engine->optimizer().state_dict().size() == 1);

  // An SGD checkpoint warm-starts an AdamW run this way; loading its state would be an error.
  const std::string sgd_dir = checkpoint_dir("sgd");
  {
    Setup sgd(R"({"train_batch_size": 2, "optimizer": {"type": "SGD",
                     "params": {"lr": 0.1, "momentum": 0.9}}})",
              5);
    sgd.train_step(0);
    sgd.engine->save_checkpoint(sgd_dir, "s");
  }
  Setup adam(kCheckpointConfig, 9);
  CHECK_THROWS_WITH_AS(adam.engine->load_checkpoint(sgd_dir),
                       doctest::Contains("load_optimizer_states = false loads the weights alone"),
                       Error);
  adam.engine->load_checkpoint(sgd_dir, "", {.load_optimizer_states = false});
  CHECK(adam.weights() == saved_weights(sgd_dir + "/s"));
  // Under ZeRO: from a ZeRO-1 checkpoint (each rank's own shards) and from the stage-0 one
  // (whole tensors, sharded on loading).
  const char* zero1 = R"({"train_batch_size": 2, "zero_optimization": {"stage": 1},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}})";
  const std::string zero_dir = checkpoint_dir("zero1");
  {
    Setup z(zero1, 5);
    for (int k = 0; k < 3; ++k) z.train_step(k);
    z.engine->save_checkpoint(zero_dir, "z");
  }
  for (const std::string& from : {zero_dir + "/z", dir + "/step4"}) {
    CAPTURE(from);
    Setup z(zero1, 9);
    const std::filesystem::path tag(from);
    z.engine->load_checkpoint(tag.parent_path().string(), tag.filename().string(),
                              {.load_optimizer_states = false});
    CHECK(z.weights() == saved_weights(from));
    CHECK(z.engine->optimizer().step_count() == 0);
    CHECK(z.engine->optimizer().state_dict().size() == 1);
    CHECK(z.engine->global_steps() > 0);
  }
  fs::remove_all(dir);
  fs::remove_all(sgd_dir);
  fs::remove_all(zero_dir);
}

TEST_CASE("load_lr_scheduler_states = false: the schedule restarts, the rest comes back") {
  double lr_at_save = 0;
  const std::string dir = four_steps("no-schedule", &lr_at_save);
  Setup fresh(kCheckpointConfig, 9);
  fresh.engine->load_checkpoint(dir, "", {.load_lr_scheduler_states = false});
  CHECK(fresh.engine->global_steps() == 4);
  CHECK(fresh.engine->lr() == 0.0);
  CHECK(fresh.engine->optimizer().step_count() == 4);
  fs::remove_all(dir);
}

TEST_CASE("load_module_strict = false: missing and unknown weights are skipped") {
  const std::string dir = four_steps("strict");
  // Drop one parameter and add one the model does not have.
  const std::string file = dir + "/step4/model.safetensors";
  auto saved = io::load_safetensors(file);
  saved.erase("transformer.ln_f.bias");
  saved["transformer.extra"] = zeros({3});
  io::save_safetensors(file, saved);

  Setup strict(kCheckpointConfig, 9);
  CHECK_THROWS_WITH_AS(strict.engine->load_checkpoint(dir),
                       doctest::Contains("does not match this model: missing keys (1): "
                                         "transformer.ln_f.bias; unexpected keys (1): "
                                         "transformer.extra; a checkpoint of another"),
                       Error);
  Setup loose(kCheckpointConfig, 9);
  const std::vector<double> own_bias = loose.model->transformer.ln_f.bias.to_vector();
  loose.engine->load_checkpoint(dir, "", {.load_module_strict = false});
  CHECK(loose.model->transformer.ln_f.bias.to_vector() == own_bias);
  CHECK(loose.model->transformer.wte.weight.to_vector() ==
        saved.at("transformer.wte.weight").to_vector());
  CHECK(loose.engine->global_steps() == 4);

  Setup zero(R"({"train_batch_size": 2, "zero_optimization": {"stage": 1},
                    "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}})",
             9);
  CHECK_THROWS_WITH_AS(zero.engine->load_checkpoint(dir, "", {.load_module_strict = false}),
                       doctest::Contains("not supported with ZeRO"), Error);
  fs::remove_all(dir);
}

TEST_CASE("save_16bit_model: the weights in the compute dtype; ZeRO-3 only when asked to gather") {
  const std::string dir = checkpoint_dir("16bit");
  Setup bf16(R"({"train_batch_size": 2, "bf16": {"enabled": true},
                    "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}})",
             5);
  bf16.train_step(0);
  CHECK(bf16.engine->save_16bit_model(dir));
  const auto file = io::load_safetensors(dir + "/model.safetensors");
  CHECK(file.size() == bf16.model->state_dict().size());
  for (const auto& entry : bf16.model->state_dict()) {
    const std::string& name = entry.first;  // (not a structured binding: CAPTURE is a lambda)
    CAPTURE(name);
    CHECK(file.at(name).dtype() == DType::BFloat16);
    CHECK(file.at(name).to_vector() == entry.second.to_vector());
  }

  Setup z3(R"({"train_batch_size": 2, "zero_optimization": {"stage": 3},
                  "optimizer": {"type": "AdamW", "params": {"lr": 0.003}}})",
           5);
  z3.train_step(0);
  CHECK_FALSE(z3.engine->save_16bit_model(dir, "z3.safetensors"));
  CHECK_FALSE(fs::exists(dir + "/z3.safetensors"));
  CHECK_THROWS_WITH_AS(z3.engine->save_16bit_model(dir, "../x"),
                       doctest::Contains("is not a file name"), Error);
  fs::remove_all(dir);
}
