// PipelineLayerFiles: a pipeline stage's checkpoint files, one pair per layer (see the header).
#include "pipeline_layer_files.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "tessera/engine/checkpoint_state.h"
#include "tessera/engine/engine.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops.h"
#include "tessera/parallel/tensor_parallel_layout.h"

namespace tessera::engine {

namespace fs = std::filesystem;

namespace {

// The checkpoint's weights no stage of the pipeline claims (strict loads refuse them, as one
// process's load_state_dict does): every stage marks the names it takes, and the marks meet
// over the pipe group (every rank reads the same checkpoint, so the names line up).
std::vector<std::string> unclaimed_weights(const std::map<std::string, Tensor>& saved,
                                           const std::set<std::string>& claimed,
                                           parallel::ProcessGroup* pipe) {
  std::vector<double> marks;
  for (const auto& entry : saved) marks.push_back(claimed.count(entry.first) ? 1.0 : 0.0);
  if (marks.empty()) return {};
  Tensor t = from_vector(marks, {static_cast<int64_t>(marks.size())});
  if (pipe) pipe->all_reduce(t, parallel::ReduceOp::Max);
  const std::vector<double> all = t.to_vector();
  std::vector<std::string> out;
  size_t i = 0;
  for (const auto& entry : saved)
    if (all[i++] == 0.0) out.push_back(entry.first);
  return out;
}

// The optimizer's entries of no parameter (0/1 Adam's schedule counters, 1-bit LAMB's flat
// momentum buffer): kept per stage, since each stage's optimizer has its own.
bool optimizer_wide(const std::string& key, const std::set<std::string>& params) {
  if (key == "step") return false;  // (in every layer file)
  const size_t dot = key.rfind('.');
  return dot == std::string::npos || !params.count(key.substr(0, dot));
}

std::set<std::string> parameter_names(parallel::PipelineModule& module) {
  std::set<std::string> out;
  for (const auto& [name, p] : module.named_parameters()) out.insert(name);
  return out;
}

}  // namespace

std::string PipelineLayerFiles::stage_dir() const {
  char dir[32];
  std::snprintf(dir, sizeof dir, "stage_%02d", pipe_->rank());
  return dir;
}

std::string PipelineLayerFiles::wide_file() const {
  return checkpoint_weights_file("optimizer_wide",
                                 tensor_parallel_ ? tensor_parallel_->rank() : -1);
}

PipelineLayerFiles::PipelineLayerFiles(parallel::PipelineModule& module,
                                       std::shared_ptr<parallel::ProcessGroup> pipe,
                                       std::shared_ptr<parallel::ProcessGroup> tensor_parallel)
    : module_(module), pipe_(std::move(pipe)), tensor_parallel_(std::move(tensor_parallel)) {}

std::pair<std::string, std::string> PipelineLayerFiles::where(const std::string& param) const {
  char file[32];
  std::snprintf(file, sizeof file, "layer_%02lld", static_cast<long long>(module_.layer_of(param)));
  return {module_.saves(param) ? file : "", module_.saved_name(param)};
}

void PipelineLayerFiles::describe(nlohmann::json& engine_state) const {
  engine_state["pipeline"] = {{"stages", pipe_->size()}};
}

void PipelineLayerFiles::write(Engine& engine, const fs::path& tmp) {
  TS_CHECK(engine.zero_stage() < 3, "save_checkpoint: pipelines with ZeRO-3 are not built");
  // By this stage's parameter names (collective over the replicas with ZeRO).
  const RankCheckpointState state = engine.training_state();
  const std::map<std::string, Tensor>& weights = state.weights;
  const std::map<std::string, Tensor>& opt = state.optimizer;
  // The stage's own optimizer state: each rank's (1-bit Adam's errors, ...) and the entries of
  // no parameter, in stage_SS/ (a resume needs the same stages and ranks).
  const fs::path stage = tmp / stage_dir();
  engine.write_optimizer_rank_state(stage);
  if (engine.rank() != 0) return;  // each stage's (and tensor-parallel rank's) first replica
  std::map<std::string, Tensor> wide;
  const std::set<std::string> params = parameter_names(module_);
  for (const auto& [key, value] : opt)
    if (optimizer_wide(key, params)) wide[key] = value;
  if (!wide.empty()) {
    fs::create_directories(stage);
    io::save_safetensors((stage / wide_file()).string(), wide);
  }
  // 3D: each tensor-parallel rank writes its shards, in files that say how they merge.
  const parallel::TensorParallelLayout layout = tensor_parallel_
                                                    ? parallel::tensor_parallel_layout(module_)
                                                    : parallel::TensorParallelLayout{};
  std::map<std::string, std::map<std::string, Tensor>> model_files, optimizer_files;
  std::map<std::string, parallel::TensorParallelLayout> file_layouts;  // by saved name
  std::map<std::string, std::pair<std::string, std::string>> placed;   // name -> (file, saved)
  for (const auto& [name, value] : weights) {
    const auto [file, saved] = where(name);
    if (file.empty()) continue;  // another stage's copy
    placed[name] = {file, saved};
    model_files[file][saved] = value;
    if (auto split = layout.find(name); split != layout.end())
      file_layouts[file][saved] = split->second;
  }
  // Optimizer state: "<param>.<slot>", and the step count in every file.
  for (const auto& [key, value] : opt) {
    if (key == "step") continue;
    const size_t dot = key.rfind('.');
    auto it = dot == std::string::npos ? placed.end() : placed.find(key.substr(0, dot));
    if (it == placed.end()) continue;
    optimizer_files[it->second.first][it->second.second + key.substr(dot)] = value;
  }
  std::map<std::string, std::string> metadata;
  const std::string suffix =
      tensor_parallel_ ? "_tp" + std::to_string(tensor_parallel_->rank()) : "";
  for (auto& [file, layer_weights] : model_files) {
    if (tensor_parallel_)
      metadata = {{"tensor_parallel_size", std::to_string(tensor_parallel_->size())},
                  {"tensor_parallel_layout", parallel::layout_to_json(file_layouts[file]).dump()}};
    io::save_safetensors((tmp / (file + "-model" + suffix + ".safetensors")).string(),
                         layer_weights, metadata);
    auto& state = optimizer_files[file];
    if (opt.count("step")) state["step"] = opt.at("step");
    io::save_safetensors((tmp / (file + "-optimizer" + suffix + ".safetensors")).string(), state,
                         metadata);
  }
}

void PipelineLayerFiles::load(Engine& engine, const fs::path& dir, bool strict,
                              bool load_optimizer) {
  // Whatever layout saved it: the whole model's state, by the whole model's names.
  const WholeCheckpointState whole = read_whole_checkpoint(dir.string(), load_optimizer);
  const auto named = module_.named_parameters();
  // This stage's entries under its own names, whole; then (3D) this rank's shards of them.
  std::map<std::string, Tensor> weights, opt_state;
  std::set<std::string> claimed;
  for (const auto& [name, buffer] : module_.named_buffers(true)) claimed.insert(where(name).second);
  std::vector<std::string> missing;
  for (const auto& [name, param] : named) {
    // (A copy another stage saves loads from the same entry.)
    const std::string saved = where(name).second;
    claimed.insert(saved);
    auto it = whole.weights.find(saved);
    if (it == whole.weights.end()) {
      missing.push_back(saved + " (this stage's '" + name + "')");
      continue;
    }
    weights[name] = it->second;
    if (!load_optimizer) continue;
    const std::string prefix = saved + ".";
    for (auto o = whole.optimizer.lower_bound(prefix);
         o != whole.optimizer.end() && o->first.compare(0, prefix.size(), prefix) == 0; ++o)
      opt_state[name + o->first.substr(saved.size())] = o->second;
  }
  if (strict) {  // (collective: every stage checks, so every stage agrees)
    const std::vector<std::string> unexpected =
        unclaimed_weights(whole.weights, claimed, pipe_.get());
    if (!missing.empty() || !unexpected.empty())
      fail_key_mismatch(dir.string(), missing, unexpected);
  }
  if (tensor_parallel_) {
    const parallel::TensorParallelLayout layout = parallel::tensor_parallel_layout(module_);
    const int rank = tensor_parallel_->rank(), size = tensor_parallel_->size();
    weights = parallel::shard_state(weights, layout, rank, size);
    opt_state = parallel::shard_state(opt_state, layout, rank, size);
  }
  for (const auto& [name, param] : named) {
    auto it = weights.find(name);
    TS_CHECK(it == weights.end() || it->second.shape() == param->shape(), "load_checkpoint: '",
             dir.string(), "': '", where(name).second, "' is ", it->second.describe(),
             tensor_parallel_ ? " (this tensor-parallel rank's shard)" : "", ", this stage's '",
             name, "' ", param->describe());
  }
  if (whole.optimizer.count("step")) opt_state["step"] = whole.optimizer.at("step");
  const fs::path stage = dir / stage_dir();
  if (load_optimizer) {
    // Stage state belongs to the stage's layers: another stage count splits them otherwise.
    const optim::Optimizer& opt = engine.optimizer();
    check_stage_state_count(dir.string(), pipe_->size(), opt.takes_data_parallel_transport(),
                            opt.name());
    if (fs::exists(stage / wide_file()))
      for (auto& [key, value] : io::load_safetensors((stage / wide_file()).string()))
        opt_state[key] = value;
  }
  engine.load_training_state(weights, load_optimizer ? &opt_state : nullptr, dir.string());
  if (load_optimizer && fs::exists(stage)) engine.load_optimizer_rank_state(stage);
}

}  // namespace tessera::engine
