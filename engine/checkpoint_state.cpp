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

namespace {

std::map<std::string, Tensor> load_file(const fs::path& dir, const std::string& name) {
  const fs::path f = dir / name;
  TS_CHECK(fs::exists(f), "checkpoint: '", f.string(), "' is missing");
  return io::load_safetensors(f.string());
}

// Every layer_*-model.safetensors (and -optimizer) of a pipeline checkpoint, merged.
void read_layer_files(const fs::path& dir, WholeCheckpointState& out, bool with_optimizer) {
  std::vector<std::string> layers;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const std::string suffix = "-model.safetensors";
    if (name.rfind("layer_", 0) == 0 && name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      layers.push_back(name.substr(0, name.size() - suffix.size()));
  }
  TS_CHECK(!layers.empty(), "checkpoint: '", dir.string(),
           "' is a pipeline checkpoint without layer_*-model.safetensors files");
  std::sort(layers.begin(), layers.end());
  for (const std::string& layer : layers) {
    out.weights.merge(load_file(dir, layer + "-model.safetensors"));
    if (with_optimizer) out.optimizer.merge(load_file(dir, layer + "-optimizer.safetensors"));
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
  if (root.has("pipeline")) {  // one file pair per layer, names already the whole model's
    out.data_parallel = static_cast<int>(root.integer("world_size", 1, 1 << 20));
    out.pipeline_stages = static_cast<int>(root.object("pipeline").integer("stages", 1, 1 << 16));
    read_layer_files(dir, out, with_optimizer);
    return out;
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
    return out;
  }
  const fs::path dir(tag_dir);
  out.weights = load_file(dir, checkpoint_weights_file("model", tp_rank));
  if (with_optimizer) out.optimizer = load_file(dir, checkpoint_weights_file("optimizer", tp_rank));
  return out;
}

}  // namespace tessera::engine
