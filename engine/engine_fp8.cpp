// The engine's FP8 training (engine/fp8_config.h): scaling states for the model's FP8 layers,
// the delayed-scaling update after each step, and their place in checkpoints.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "tessera/engine/engine.h"
#include "tessera/engine/fp8_config.h"
#include "tessera/grad_mode.h"
#include "tessera/io/json_fields.h"
#include "tessera/ops.h"
#include "tessera/parallel/pipeline_module.h"

namespace tessera::engine {

namespace {

const char* const kTensorNames[3] = {"input", "weight", "grad_output"};

std::array<Fp8TensorScaling*, 3> tensors_of(Fp8LinearScaling& s) {
  return {&s.input, &s.weight, &s.grad_output};
}

// A pipeline stage's FP8 layers under the whole model's names (a layer "3.attn.c_attn" of the
// stage is the model's "transformer.h.2.attn.c_attn"), so checkpoints carry their scales
// across pipeline layouts.
void name_as_whole_model(nn::Module& model, parallel::Fp8Layers& layers) {
  const auto* stage = dynamic_cast<const parallel::PipelineModule*>(&model);
  if (!stage) return;
  const std::string weight = ".weight";
  for (auto& [path, s] : layers) {
    const std::string saved = stage->saved_name(path + weight);
    TS_CHECK(saved.size() > weight.size() && saved.ends_with(weight), "engine: FP8 layer '", path,
             "' is saved as '", saved, "', not as a layer's weight");
    path = saved.substr(0, saved.size() - weight.size());
  }
}

// Text over a group: every rank's `mine`, in rank order (4 bytes an Int32 element).
std::vector<std::string> gather_text(parallel::ProcessGroup& group, const std::string& mine) {
  const int n = group.size();
  Tensor sizes = Tensor::empty({n}, DType::Int64);
  group.all_gather(sizes, full({1}, static_cast<double>(mine.size()), DType::Int64));
  const std::vector<double> each = sizes.to_vector();
  int64_t words = 1;
  for (const double b : each) words = std::max(words, (static_cast<int64_t>(b) + 3) / 4);
  Tensor send = zeros({words}, DType::Int32);
  std::memcpy(send.data<int32_t>(), mine.data(), mine.size());
  Tensor all = Tensor::empty({n * words}, DType::Int32);
  group.all_gather(all, send);
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data<int32_t>() + r * words),
                     static_cast<size_t>(each[static_cast<size_t>(r)]));
  return out;
}

}  // namespace

void Engine::setup_fp8() {
  const Fp8Config& f = fp8_config(config_);
  if (!f.enabled) return;
  fp8_ = true;
  TS_CHECK(f.recipe.reduce_amax || (group_->size() == 1 && !tp_group_),
           "engine: 'fp8.reduce_amax' false with more than one rank is not built (each rank's "
           "scales would differ, and a checkpoint keeps one set)");
  fp8_layers_ = parallel::enable_fp8(model_, f.recipe, device());
  // MoE experts held by this rank alone (expert parallelism): their layers' amaxes meet over
  // the ranks holding the same experts, their scales over the expert-parallel group.
  std::set<std::string> experts;
  for (auto& [name, t] : model_.named_parameters())
    if (is_expert(t)) experts.insert(name);
  for (const auto& [path, s] : fp8_layers_) fp8_expert_.push_back(experts.count(path + ".weight"));
  name_as_whole_model(model_, fp8_layers_);
  // A rank's backward carries its local mean's gradient: N times its share of the global
  // batch's for N data-parallel ranks. The gradients' first scale is 1/N (Transformer Engine:
  // 1), so every layout casts one process's numbers from the first step; from the first update
  // on, the reduced amax (N times one process's) gives that by itself.
  for (auto& [path, s] : fp8_layers_)
    s->grad_output.scale = 1.0f / static_cast<float>(group_->size());
  // (A pipeline stage may hold none, the job must hold some.)
  Tensor layers = full({1}, static_cast<double>(fp8_layers_.size()), DType::Int64);
  if (pipe_group_) pipe_group_->all_reduce(layers, parallel::ReduceOp::Sum);
  TS_CHECK(layers.item() > 0,
           "engine: 'fp8.enabled' but the model has no layer whose GEMM runs through FP8 "
           "(parallel::ColumnParallelLinear and RowParallelLinear do)");
}

void Engine::update_fp8_scales() {
  if (fp8_layers_.empty()) return;
  NoGradGuard no_grad;
  const nn::Fp8Recipe& recipe = fp8_config(config_).recipe;
  // One vector of every tensor's amax, reduced as one collective per group (experts': over
  // their replicas and the tensor-parallel group, which runs them whole).
  std::vector<double> host;
  std::vector<size_t> at(fp8_layers_.size());
  for (const bool expert : {false, true}) {
    std::vector<Tensor> amaxes;
    for (size_t i = 0; i < fp8_layers_.size(); ++i) {
      if (fp8_expert_[i] != expert) continue;
      at[i] = host.size() + amaxes.size();
      for (Fp8TensorScaling* t : tensors_of(*fp8_layers_[i].second)) amaxes.push_back(t->amax);
    }
    if (amaxes.empty()) continue;
    Tensor all = cat(amaxes, 0);
    parallel::ProcessGroup* data = expert ? expert_data_group_.get() : group_.get();
    if (recipe.reduce_amax)
      for (parallel::ProcessGroup* g : {data, tp_group_.get()})
        if (g && g->size() > 1) g->all_reduce(all, parallel::ReduceOp::Max);
    const std::vector<double> part = all.to(Device::cpu()).to_vector();
    host.insert(host.end(), part.begin(), part.end());
  }
  // (global_steps_ counts the steps before this one: the interval counts completed steps.)
  const bool rescale = (global_steps_ + 1) % recipe.interval == 0;
  for (size_t l = 0; l < fp8_layers_.size(); ++l) {
    Fp8LinearScaling& s = *fp8_layers_[l].second;
    size_t i = at[l];
    int k = 0;
    for (Fp8TensorScaling* t : tensors_of(s)) {
      recipe.update(*t, static_cast<float>(host[i++]),
                    k++ < 2 ? s.forward_format : s.backward_format, rescale);
      t->amax.zero_();
    }
  }
}

nlohmann::json Engine::fp8_state() {
  nlohmann::json layers = nlohmann::json::object();
  for (const auto& [path, s] : fp8_layers_) {
    nlohmann::json layer;
    int k = 0;
    for (Fp8TensorScaling* t : tensors_of(*s))
      layer[kTensorNames[k++]] = {{"scale", t->scale}, {"amax_history", t->history}};
    layers[path] = layer;
  }
  // Each pipeline stage holds its own layers, each expert-parallel rank its own experts (the
  // same on their data- and tensor-parallel peers, or replicas).
  for (parallel::ProcessGroup* g : {pipe_group_.get(), expert_group_.get()})
    if (g && g->size() > 1)
      for (const std::string& text : gather_text(*g, layers.dump()))
        layers.update(nlohmann::json::parse(text));
  return layers;
}

void Engine::load_fp8_state(const nlohmann::json& state, const std::string& where) {
  if (!fp8_) return;
  if (!state.contains("fp8")) {
    if (is_lead())
      std::cerr << "note: load_checkpoint: " << where
                << " was saved without fp8: the FP8 scales start afresh\n";
    return;
  }
  const io::JsonFields layers(state["fp8"], where + ": engine.json 'fp8'");
  const int64_t history_len = fp8_config(config_).recipe.amax_history_len;
  for (auto& [path, s] : fp8_layers_) {
    const io::JsonFields layer = layers.object(path);
    int k = 0;
    for (Fp8TensorScaling* t : tensors_of(*s)) {
      const io::JsonFields saved = layer.object(kTensorNames[k++]);
      const double scale = saved.number("scale");
      TS_CHECK(std::isfinite(scale) && scale > 0, saved.where(),
               ": 'scale' must be a positive number, found ", scale);
      std::vector<float> history;
      for (const nlohmann::json& a : saved.array("amax_history")) {
        // (JSON has no NaN or infinity: either is written null, and either keeps a scale.)
        TS_CHECK(a.is_number() || a.is_null(), saved.where(), ": 'amax_history' holds ", a.dump(),
                 ", not a number");
        history.push_back(a.is_null() ? std::numeric_limits<float>::quiet_NaN()
                                      : static_cast<float>(a.get<double>()));
      }
      // (A shorter amax_history_len now keeps the newest.)
      if (static_cast<int64_t>(history.size()) > history_len)
        history.resize(static_cast<size_t>(history_len));
      t->scale = static_cast<float>(scale);
      t->history = std::move(history);
      t->amax.zero_();
    }
  }
}

}  // namespace tessera::engine
