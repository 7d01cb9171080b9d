// A pipeline stage's part of a checkpoint: one pair of files per layer
// (layer_XX-model.safetensors, layer_XX-optimizer.safetensors, DeepSpeed's layer_XX-model_states
// idea), under the names the whole model gives its parameters, so any number of stages, or
// one process, finds what it needs. 3D: a pair per layer and tensor-parallel rank
// (layer_XX-model_tpR.safetensors), whose metadata says how the ranks' shards merge.
#include <filesystem>
#include <map>
#include <set>

#include "tessera/engine/checkpoint_state.h"
#include "tessera/engine/engine.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops.h"
#include "tessera/parallel/tensor_parallel_layout.h"
#include "tessera/parallel/zero_optimizer.h"

namespace tessera::engine {

namespace fs = std::filesystem;

namespace {

// ZeRO-1/2: this stage's masters and optimizer state, whole, from every replica's shards
// (collective over the data-parallel group).
void gather_zero_state(parallel::ZeroOptimizer& zero, parallel::ProcessGroup& group,
                       std::map<std::string, Tensor>& weights, std::map<std::string, Tensor>& opt) {
  const std::map<std::string, Tensor> shards = zero.shard_state();
  const int world = group.size();
  for (const auto& e : zero.layout().entries) {
    const std::string prefix = e.name + ".";
    for (auto it = shards.lower_bound(e.name); it != shards.end(); ++it) {
      const std::string& key = it->first;
      const bool master = key == e.name;
      if (!master && key.compare(0, prefix.size(), prefix) != 0) break;
      if (!master && key.find('.', prefix.size()) != std::string::npos) continue;  // another's
      Tensor all = Tensor::empty({world * e.shard}, it->second.dtype(), it->second.device());
      group.all_gather(all, it->second.contiguous());
      Tensor whole = all.narrow(0, 0, e.numel).reshape(e.shape);
      (master ? weights[e.name] : opt[key]) = whole;
    }
  }
  const auto state = zero.optimizer().state_dict();
  if (state.count("step")) opt["step"] = state.at("step");
}

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

}  // namespace

void Engine::write_layer_files(const fs::path& tmp) {
  TS_CHECK(!zero_ || zero_->stage() < 3, "save_checkpoint: pipelines with ZeRO-3 are not built");
  std::map<std::string, Tensor> weights, opt;  // by this stage's parameter names
  if (zero_) {
    gather_zero_state(*zero_, *group_, weights, opt);
  } else {
    const auto named = model_.named_parameters();
    for (size_t i = 0; i < named.size(); ++i)
      weights[named[i].first] = master_.empty() ? *named[i].second : master_[i].second;
    opt = optimizer_->state_dict();
  }
  if (group_->rank() != 0) return;  // each stage's (and tensor-parallel rank's) first replica
  // 3D: each tensor-parallel rank writes its shards, in files that say how they merge.
  const parallel::TensorParallelLayout layout =
      tp_group_ ? parallel::tensor_parallel_layout(model_) : parallel::TensorParallelLayout{};
  std::map<std::string, std::map<std::string, Tensor>> model_files, optimizer_files;
  std::map<std::string, parallel::TensorParallelLayout> file_layouts;  // by saved name
  std::map<std::string, std::pair<std::string, std::string>> where;    // name -> (file, saved)
  for (const auto& [name, value] : weights) {
    const auto [file, saved] = pipe_checkpoint_names_(name);
    if (file.empty()) continue;  // another stage's copy
    where[name] = {file, saved};
    model_files[file][saved] = value;
    if (auto split = layout.find(name); split != layout.end())
      file_layouts[file][saved] = split->second;
  }
  // Optimizer state: "<param>.<slot>", and the step count in every file.
  for (const auto& [key, value] : opt) {
    if (key == "step") continue;
    const size_t dot = key.rfind('.');
    auto it = dot == std::string::npos ? where.end() : where.find(key.substr(0, dot));
    if (it == where.end()) continue;
    optimizer_files[it->second.first][it->second.second + key.substr(dot)] = value;
  }
  std::map<std::string, std::string> metadata;
  const std::string suffix = tp_group_ ? "_tp" + std::to_string(tp_group_->rank()) : "";
  for (auto& [file, layer_weights] : model_files) {
    if (tp_group_)
      metadata = {{"tensor_parallel_size", std::to_string(tp_group_->size())},
                  {"tensor_parallel_layout", parallel::layout_to_json(file_layouts[file]).dump()}};
    io::save_safetensors((tmp / (file + "-model" + suffix + ".safetensors")).string(),
                         layer_weights, metadata);
    auto& state = optimizer_files[file];
    if (opt.count("step")) state["step"] = opt.at("step");
    io::save_safetensors((tmp / (file + "-optimizer" + suffix + ".safetensors")).string(), state,
                         metadata);
  }
}

void Engine::load_layer_files(const fs::path& dir, bool strict, bool load_optimizer) {
  // Whatever layout saved it: the whole model's state, by the whole model's names.
  const WholeCheckpointState whole = read_whole_checkpoint(dir.string(), load_optimizer);
  const auto named = model_.named_parameters();
  // This stage's entries under its own names, whole; then (3D) this rank's shards of them.
  std::map<std::string, Tensor> weights, opt_state;
  std::set<std::string> claimed;
  for (const auto& [name, buffer] : model_.named_buffers(true))
    claimed.insert(pipe_checkpoint_names_(name).second);
  std::vector<std::string> missing;
  for (const auto& [name, param] : named) {
    // (A copy another stage saves loads from the same entry.)
    const std::string saved = pipe_checkpoint_names_(name).second;
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
        unclaimed_weights(whole.weights, claimed, pipe_group_.get());
    if (!missing.empty() || !unexpected.empty())
      fail_key_mismatch(dir.string(), missing, unexpected);
  }
  if (tp_group_) {
    const parallel::TensorParallelLayout layout = parallel::tensor_parallel_layout(model_);
    weights = parallel::shard_state(weights, layout, tp_group_->rank(), tp_group_->size());
    opt_state = parallel::shard_state(opt_state, layout, tp_group_->rank(), tp_group_->size());
  }
  std::map<std::string, Tensor> masters;
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string& name = named[i].first;
    auto it = weights.find(name);
    if (it == weights.end()) continue;
    Tensor& target = master_.empty() ? *named[i].second : master_[i].second;
    TS_CHECK(it->second.shape() == target.shape(), "load_checkpoint: '", dir.string(), "': '",
             pipe_checkpoint_names_(name).second, "' is ", it->second.describe(),
             tp_group_ ? " (this tensor-parallel rank's shard)" : "", ", this stage's '", name,
             "' ", target.describe());
    if (zero_)
      masters[name] = it->second;
    else
      target.copy_(it->second);
  }
  if (whole.optimizer.count("step")) opt_state["step"] = whole.optimizer.at("step");
  if (zero_) {
    zero_->load_full_state(masters, load_optimizer ? &opt_state : nullptr);
    return;
  }
  if (!master_.empty()) sync_master_to_model();
  if (load_optimizer) optimizer_->load_state_dict(opt_state);
}

}  // namespace tessera::engine
