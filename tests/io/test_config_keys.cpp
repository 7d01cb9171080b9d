// The config reference (TrainConfig::describe_keys, `tessera config-keys`): every key it lists
// is one the reader takes, every key of the shipped configs is listed, and its defaults are
// DeepSpeed's (transcribed below from DeepSpeed's sources) except where Tessera says why not;
// every key has a line saying what it does, written beside the parser that reads it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/error.h"
#include "tessera/io/train_config.h"

using namespace tessera;
using io::config::ConfigKey;
using json = nlohmann::json;

namespace {

std::map<std::string, ConfigKey> reference() {
  std::map<std::string, ConfigKey> out;
  for (const ConfigKey& k : io::TrainConfig::describe_keys()) out[k.key] = k;
  return out;
}

void set_path(json& doc, const std::string& key, const json& value) {
  json* at = &doc;
  size_t from = 0;
  for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', from)) {
    at = &(*at)[key.substr(from, dot - from)];
    from = dot + 1;
  }
  (*at)[key.substr(from)] = value;
}

// A value of the key's kind: its default where it has one.
json sample_value(const ConfigKey& k) {
  if (!k.default_value.empty()) return json::parse(k.default_value);
  if (k.kind == "true/false") return false;
  if (k.kind == "integer") return 1;
  if (k.kind == "number") return 1.0;
  return "";
}

void flatten(const json& j, const std::string& path, std::vector<std::string>& out) {
  for (const auto& [k, v] : j.items()) {
    if (k.rfind("_", 0) == 0) continue;  // "_comment" notes
    const std::string key = path.empty() ? k : path + "." + k;
    out.push_back(key);
    if (v.is_object() && key != "optimizer.params" && key != "scheduler.params")
      flatten(v, key, out);
  }
}

}  // namespace

TEST_CASE("config reference: every key it lists is read by the config reader") {
  const std::vector<ConfigKey> keys = io::TrainConfig::describe_keys();
  REQUIRE(keys.size() > 100);
  for (const ConfigKey& k : keys) {
    CAPTURE(k.key);
    CHECK(!k.kind.empty());
    if (k.kind == "object") continue;
    json doc = {{"train_micro_batch_size_per_gpu", 1}};
    set_path(doc, k.key, sample_value(k));
    try {
      const io::TrainConfig c = io::TrainConfig::parse(doc.dump(), 1, "keys.json");
      for (const std::string& unknown : c.unknown_keys)
        CHECK_MESSAGE(unknown.find("'" + k.key + "'") == std::string::npos, unknown);
    } catch (const Error& e) {
      // A value the reader refuses (a default of 0 meaning "derived") is refused by name.
      CHECK_MESSAGE(std::string(e.what()).find(k.key) != std::string::npos, e.what());
    }
  }
}

TEST_CASE("config reference: the keys of every shipped config are in it") {
  const std::map<std::string, ConfigKey> ref = reference();
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(TESSERA_SOURCE_ROOT "/configs")) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    std::ifstream in(entry.path());
    const json j = json::parse(in, nullptr, true, /*ignore_comments=*/true);
    std::vector<std::string> stated;
    flatten(j, "", stated);
    for (const std::string& key : stated) {
      CAPTURE(entry.path().filename().string());
      CHECK_MESSAGE(ref.count(key), key);
    }
  }
  CHECK(files >= 6);
}

TEST_CASE("config reference: every key says what it does, in the section that reads it") {
  const std::map<std::string, ConfigKey> ref = reference();
  for (const auto& entry : ref) {
    const std::string key = entry.first;
    CAPTURE(key);
    CHECK_FALSE(entry.second.note.empty());
  }
  CHECK(ref.at("zero_optimization").note.find("ZeRO") == 0);  // a section's own line
  CHECK(ref.at("tensorboard").note == "a TensorBoard event file in output_path/job_name/");
  // A line for a key the section never reads (a misspelt name) is reported, not listed.
  io::config::ConfigKeyRecorder recorder;
  recorder.note("toy.widht", "parts the batch splits into");
  recorder.note("toy.mode", "how fast");
  recorder.read("toy.mode", "string", "\"fast\"");
  CHECK(recorder.unread_notes() == std::vector<std::string>{"toy.widht"});
  REQUIRE(recorder.keys().size() == 1);
  CHECK(recorder.keys()[0].note == "how fast");
}

TEST_CASE("config reference: what a value must be comes from the registries and the reader") {
  const std::map<std::string, ConfigKey> ref = reference();
  CHECK(ref.at("pipeline.schedule").expected == "one of 1f1b, zb-h1, interleaved");
  CHECK(ref.at("model.type").expected == "one of bert, gpt2");
  CHECK(ref.at("optimizer.type").expected ==
        "one of Adam, AdamW, SGD, Lamb, OneBitAdam, ZeroOneAdam, OneBitLamb");
  CHECK(ref.at("fp16.loss_scale").expected == ">= 0 (0 = dynamic)");
  CHECK(ref.at("zero_optimization.stage").expected == "0, 1, 2 or 3");
  CHECK(ref.at("zero_optimization.offload_optimizer.device").expected ==
        "\"cpu\", \"nvme\" or \"none\"");
  CHECK(ref.at("zero_optimization.offload_optimizer").kind == "object");
  CHECK(ref.at("zero_optimization.contiguous_gradients").note.find("no effect in Tessera") == 0);
  CHECK(ref.at("zero_optimization.contiguous_gradients").default_value.empty());
  CHECK(ref.at("zero_optimization.stage3_max_live_parameters").default_value == "1000000000");
  CHECK(ref.at("zero_optimization.offload_param.device").expected ==
        "\"cpu\", \"nvme\" or \"none\"");
  CHECK(ref.at("zero_optimization.sub_group_size").default_value == "1000000000");
  // The parameters under optimizer.params / scheduler.params are their registries' tables.
  for (const auto& entry : ref) {
    const std::string& key = entry.first;  // (clang 14's lambdas cannot capture bindings)
    CHECK_MESSAGE(key.rfind("optimizer.params.", 0) != 0, key);
    CHECK_MESSAGE(key.rfind("scheduler.params.", 0) != 0, key);
  }
  // A rule's message and the reference say the same.
  CHECK_THROWS_WITH_AS(
      io::TrainConfig::parse(R"({"train_batch_size": 2, "fp16": {"loss_scale": -1}})", 1, "c.json"),
      "c.json: 'fp16.loss_scale' is -1, expected >= 0 (0 = dynamic)", Error);
}

// DeepSpeed's defaults, transcribed from deepspeedai/DeepSpeed at edaa722 (2026-08-22):
// deepspeed/runtime/constants.py, zero/config.py, activation_checkpointing/config.py,
// profiling/constants.py, monitor/config.py, comm/config.py, and get_pipeline_config and
// get_sparse_attention in runtime/config.py. (The fixtures' oracle is DeepSpeed 0.19.8:
// tests/fixtures/deepspeed_venv.sh.)
TEST_CASE("config reference: the defaults are DeepSpeed's") {
  const std::map<std::string, ConfigKey> ref = reference();
  const std::vector<std::pair<std::string, json>> deepspeed = {
      {"gradient_clipping", 1.0},  // GRADIENT_CLIPPING_DEFAULT (1.0 since DeepSpeed 0.19.3)
      {"prescale_gradients", false},
      {"gradient_predivide_factor", 1.0},
      {"dataloader_drop_last", false},
      {"wall_clock_breakdown", false},
      {"memory_breakdown", false},
      {"fp16.enabled", false},
      {"fp16.loss_scale", 0},
      {"fp16.initial_scale_power", 16},
      {"fp16.loss_scale_window", 1000},
      {"fp16.hysteresis", 2},
      {"fp16.consecutive_hysteresis", false},
      {"fp16.min_loss_scale", 1},
      {"bf16.enabled", false},
      {"zero_optimization.stage", 0},
      {"zero_optimization.reduce_bucket_size", 500000000},
      {"zero_optimization.allgather_bucket_size", 500000000},
      {"zero_optimization.stage3_param_persistence_threshold", 100000},
      {"zero_optimization.stage3_prefetch_bucket_size", 50000000},
      {"zero_optimization.stage3_gather_16bit_weights_on_model_save", false},
      {"activation_checkpointing.partition_activations", false},
      {"activation_checkpointing.cpu_checkpointing", false},
      {"activation_checkpointing.contiguous_memory_optimization", false},
      {"activation_checkpointing.synchronize_checkpoint_boundary", false},
      {"activation_checkpointing.profile", false},
      {"flops_profiler.enabled", false},
      {"flops_profiler.recompute_fwd_factor", 0.0},
      {"flops_profiler.profile_step", 1},
      {"flops_profiler.module_depth", -1},
      {"flops_profiler.top_modules", 1},
      {"flops_profiler.detailed", true},
      {"flops_profiler.output_file", nullptr},
      {"tensorboard.enabled", false},
      {"tensorboard.job_name", "DeepSpeedJobName"},
      {"csv_monitor.enabled", false},
      {"csv_monitor.job_name", "DeepSpeedJobName"},
      {"wandb.enabled", false},
      {"comet.enabled", false},
      {"comms_logger.enabled", false},
      {"comms_logger.verbose", false},
      {"comms_logger.prof_all", true},
      {"comms_logger.prof_ops", json::array()},
      {"checkpoint.tag_validation", "Warn"},
      {"pipeline.seed_layers", false},
      {"pipeline.activation_checkpoint_interval", 0},
      {"sparse_attention.mode", "fixed"},  // SPARSE_*_DEFAULT
      {"sparse_attention.block", 16},
      {"sparse_attention.different_layout_per_head", false},
      {"sparse_attention.num_local_blocks", 4},
      {"sparse_attention.num_global_blocks", 1},
      {"sparse_attention.attention", "bidirectional"},
      {"sparse_attention.horizontal_global_attention", false},
      {"sparse_attention.num_different_global_patterns", 1},
      {"sparse_attention.num_random_blocks", 0},
      {"sparse_attention.local_window_blocks", {4}},
      {"sparse_attention.global_block_indices", {0}},
      {"sparse_attention.global_block_end_indices", nullptr},
      {"sparse_attention.num_sliding_window_blocks", 3},
  };
  for (const auto& row : deepspeed) {
    const std::string& key = row.first;  // (clang 14's lambdas cannot capture bindings)
    const json& value = row.second;
    CAPTURE(key);
    REQUIRE(ref.count(key));
    CHECK(json::parse(ref.at(key).default_value) == value);
  }
  // Where Tessera's default differs, and why (each also in docs/config.md's notes or the topic
  // docs): DeepSpeed's value is first.
  const std::vector<std::tuple<std::string, json, json>> differ = {
      // null: no progress line; the engine's timer and memory lines need a period
      {"steps_per_print", nullptr, 10},
      // DeepSpeed overlaps at stage 3 only; Tessera at every stage (the same numbers)
      {"zero_optimization.overlap_comm", nullptr, true},
      // "" is the working directory in both
      {"tensorboard.output_path", "", "./"},
      {"csv_monitor.output_path", "", "./"},
      // "auto" (the module decides) and "best" are read; the built-in models' meaning of each
      {"pipeline.stages", "auto", 1},
      {"pipeline.partition", "best", "parameters"},
  };
  for (const auto& row : differ) {
    const std::string& key = std::get<0>(row);
    CAPTURE(key);
    REQUIRE(ref.count(key));
    CHECK(json::parse(ref.at(key).default_value) == std::get<2>(row));
  }
}
