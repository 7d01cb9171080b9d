#include "tessera/engine/checkpoint_state.h"

#include <algorithm>
#include <filesystem>

#include "tessera/io/json_fields.h"
#include "tessera/io/safetensors.h"
#include "tessera/parallel/tensor_parallel_layout.h"
#include "tessera/parallel/zero_checkpoint.h"

namespace tessera::engine {

namespace fs = std::filesystem;

std::string checkpoint_weights_file(const std::string& kind, int tp_rank) {
  return tp_rank >= 0 ? kind + "_tp" + std::to_string(tp_rank) + ".safetensors"
                      : kind + ".safetensors";
}

std::string optimizer_rank_file(int rank, int tp_rank) {
  return checkpoint_weights_file("optimizer_rank" + std::to_string(rank), tp_rank);
}

std::string moe_experts_file(int ep_rank, bool optimizer) {
  return "moe_experts_" + std::to_string(ep_rank) + (optimizer ? "_optimizer" : "") +
         ".safetensors";
}

int pipeline_stage_state_dirs(const std::string& tag_dir) {
  int count = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(tag_dir, ec))
    if (entry.is_directory() && entry.path().filename().string().rfind("stage_", 0) == 0) ++count;
  return count;
}

void check_stage_state_count(const std::string& tag_dir, int stages, bool needs_it,
                             const std::string& optimizer) {
  if (!needs_it) return;
  const int saved = pipeline_stage_state_dirs(tag_dir);
  TS_CHECK(saved == 0 || saved == stages, "load_checkpoint: '", tag_dir, "' holds ", optimizer,
           "'s own state of each of ", saved,
           " pipeline stages (compression errors, schedule counters), and this run has ", stages,
           ": resume it with pipeline.stages ", saved);
}

namespace {

std::map<std::string, Tensor> load_file(const fs::path& dir, const std::string& name) {
  const fs::path f = dir / name;
  TS_CHECK(fs::exists(f), "checkpoint: '", f.string(), "' is missing");
  return io::load_safetensors(f.string());
}

// A layer's tensor-parallel files (layer_XX-model_tpR.safetensors, R = 0..N-1, and the
// -optimizer ones), merged as their metadata says.
void read_sharded_layer(const fs::path& dir, const std::string& layer, int files,
                        WholeCheckpointState& out, bool with_optimizer) {
  const fs::path first = dir / (layer + "-model_tp0.safetensors");
  TS_CHECK(fs::exists(first), "checkpoint: '", first.string(), "' is missing");
  const io::SafetensorsFile head(first.string());
  const auto& meta = head.metadata();
  TS_CHECK(meta.count("tensor_parallel_size") && meta.count("tensor_parallel_layout"),
           "checkpoint: '", first.string(),
           "' has no tensor_parallel_size / tensor_parallel_layout metadata");
  const std::string& size = meta.at("tensor_parallel_size");
  TS_CHECK(!size.empty() && size.size() <= 6 &&
               size.find_first_not_of("0123456789") == std::string::npos,
           "checkpoint: '", first.string(), "': tensor_parallel_size '", size,
           "' is not a rank count");
  const int n = std::stoi(size);
  TS_CHECK(n == files, "checkpoint: '", dir.string(), "' holds ", files,
           " tensor-parallel files of ", layer, " but they say ", n);
  const nlohmann::json layout_json =
      nlohmann::json::parse(meta.at("tensor_parallel_layout"), nullptr, false);
  TS_CHECK(!layout_json.is_discarded(), "checkpoint: '", first.string(),
           "': tensor_parallel_layout is not JSON");
  const parallel::TensorParallelLayout layout =
      parallel::layout_from_json(layout_json, first.string());
  for (const std::string kind : {"model", "optimizer"}) {
    if (kind == "optimizer" && !with_optimizer) break;
    std::vector<std::map<std::string, Tensor>> ranks;
    for (int r = 0; r < n; ++r)
      ranks.push_back(
          load_file(dir, layer + "-" + kind + "_tp" + std::to_string(r) + ".safetensors"));
    (kind == "model" ? out.weights : out.optimizer).merge(parallel::merge_states(ranks, layout));
  }
}

// Every layer_*-model.safetensors (and -optimizer) of a pipeline checkpoint, merged (3D: each
// layer's tensor-parallel shards put back together).
void read_layer_files(const fs::path& dir, WholeCheckpointState& out, bool with_optimizer) {
  std::map<std::string, int> layers;  // layer -> its tensor-parallel files (0: one whole file)
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::string suffix = ".safetensors";
    const size_t dash = name.find("-model");
    if (name.rfind("layer_", 0) != 0 || dash == std::string::npos || name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string kind = name.substr(dash + 1, name.size() - suffix.size() - dash - 1);
    if (kind == "model")
      layers[name.substr(0, dash)] += 0;
    else if (kind.rfind("model_tp", 0) == 0)
      layers[name.substr(0, dash)] += 1;
  }
  TS_CHECK(!layers.empty(), "checkpoint: '", dir.string(),
           "' is a pipeline checkpoint without layer_*-model.safetensors files");
  for (const auto& [layer, shards] : layers) {
    if (shards > 0) {
      read_sharded_layer(dir, layer, shards, out, with_optimizer);
      continue;
    }
    out.weights.merge(load_file(dir, layer + "-model.safetensors"));
    if (with_optimizer) out.optimizer.merge(load_file(dir, layer + "-optimizer.safetensors"));
  }
}

// Every expert-parallel rank's expert files (moe_experts_file), in rank order; a name two
// files hold is an error naming both.
void add_expert_files(const fs::path& dir, RankCheckpointState& out, bool with_optimizer) {
  for (int r = 0; fs::exists(dir / moe_experts_file(r, false)); ++r) {
    for (const bool optimizer : {false, true}) {
      if (optimizer && !with_optimizer) continue;
      auto& into = optimizer ? out.optimizer : out.weights;
      for (auto& [name, t] : load_file(dir, moe_experts_file(r, optimizer)))
        TS_CHECK(into.emplace(name, t).second, "checkpoint: '",
                 (dir / moe_experts_file(r, optimizer)).string(), "' holds '", name,
                 "', which another file of the checkpoint holds too");
    }
  }
}

}  // namespace

WholeCheckpointState read_whole_checkpoint(const std::string& tag_dir, bool with_optimizer) {
  const fs::path dir(tag_dir);
  const fs::path meta_path = dir / "engine.json";
  TS_CHECK(fs::exists(meta_path), "checkpoint: '", meta_path.string(),
           "' does not exist (not a Tessera checkpoint?)");
  const nlohmann::json meta = io::JsonFields::parse_file(meta_path.string());
  const io::JsonFields root(meta, io::quoted(meta_path.string()));
  WholeCheckpointState out;
  parallel::TensorParallelLayout layout;
  if (root.has("pipeline")) {  // one file pair per layer (and tensor-parallel rank), whole names
    out.data_parallel = static_cast<int>(root.integer("world_size", 1, 1 << 20));
    out.pipeline_stages = static_cast<int>(root.object("pipeline").integer("stages", 1, 1 << 16));
    if (root.has("zero"))
      out.zero_stage = static_cast<int>(root.object("zero").integer("stage", 1, 3));
    if (root.has("tensor_parallel"))
      out.tensor_parallel =
          static_cast<int>(root.object("tensor_parallel").integer("size", 1, 1 << 16));
    read_layer_files(dir, out, with_optimizer);
    return out;
  }
  if (root.has("tensor_parallel")) {
    const io::JsonFields tp = root.object("tensor_parallel");
    out.tensor_parallel = static_cast<int>(tp.integer("size", 1, 1 << 16));
    TS_CHECK(out.tensor_parallel == 1 || tp.has("layout"), tp.where(),
             " has no \"layout\": the checkpoint was saved before tensor-parallel shards could "
             "be merged; load it at its own autotp_size ",
             out.tensor_parallel);
    if (tp.has("layout"))
      layout = parallel::layout_from_json(meta["tensor_parallel"]["layout"], tp.where());
  }
  const bool zero = root.has("zero");
  if (zero) {
    const io::JsonFields z = root.object("zero");
    out.zero_stage = static_cast<int>(z.integer("stage", 1, 3));
    out.data_parallel = static_cast<int>(z.integer("world_size", 1, 1 << 20));
  } else {
    out.data_parallel = static_cast<int>(root.integer("world_size", 1, 1 << 20));
  }
  std::vector<std::map<std::string, Tensor>> weights, optimizer;
  for (int t = 0; t < out.tensor_parallel; ++t) {
    RankCheckpointState r =
        read_rank_checkpoint(tag_dir, zero, out.tensor_parallel > 1 ? t : -1, with_optimizer);
    weights.push_back(std::move(r.weights));
    optimizer.push_back(std::move(r.optimizer));
  }
  out.weights = out.tensor_parallel > 1 ? parallel::merge_states(weights, layout) : weights[0];
  if (with_optimizer)
    out.optimizer =
        out.tensor_parallel > 1 ? parallel::merge_states(optimizer, layout) : optimizer[0];
  return out;
}

RankCheckpointState read_rank_checkpoint(const std::string& tag_dir, bool zero, int tp_rank,
                                         bool with_optimizer) {
  RankCheckpointState out;
  if (zero) {
    parallel::ConsolidatedState c = parallel::consolidate_zero_checkpoint(tag_dir, tp_rank);
    out.weights = std::move(c.masters);
    if (with_optimizer) out.optimizer = std::move(c.optimizer);
    add_expert_files(fs::path(tag_dir), out, with_optimizer);  // (MoE: experts stay whole)
    return out;
  }
  const fs::path dir(tag_dir);
  out.weights = load_file(dir, checkpoint_weights_file("model", tp_rank));
  if (with_optimizer) out.optimizer = load_file(dir, checkpoint_weights_file("optimizer", tp_rank));
  add_expert_files(dir, out, with_optimizer);
  return out;
}

void fail_key_mismatch(const std::string& checkpoint, const std::vector<std::string>& missing,
                       const std::vector<std::string>& unexpected) {
  std::string msg = "load_checkpoint: '" + checkpoint + "' does not match this model: ";
  auto list = [&](const char* what, const std::vector<std::string>& keys) {
    if (keys.empty()) return;
    msg += std::string(what) + " (" + std::to_string(keys.size()) + "): ";
    for (size_t i = 0; i < keys.size() && i < 20; ++i) msg += (i ? ", " : "") + keys[i];
    msg += keys.size() > 20 ? ", ...; " : "; ";
  };
  list("missing keys", missing);
  list("unexpected keys", unexpected);
  fail(msg, "a checkpoint of another architecture? (load_module_strict: false loads what matches)");
}

}  // namespace tessera::engine
