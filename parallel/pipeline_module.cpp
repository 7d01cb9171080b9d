#include "tessera/parallel/pipeline_module.h"

#include <algorithm>

#include "tessera/error.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/tensor_parallel_layout.h"
#include "tessera/rng.h"

namespace tessera::parallel {

namespace {

// Keeps the default generator where it was: building (or counting) layers draws from it.
class GeneratorRestore {
 public:
  GeneratorRestore() : state_(default_generator().state()) {}
  ~GeneratorRestore() { default_generator().set_state(state_); }
  GeneratorRestore(const GeneratorRestore&) = delete;
  GeneratorRestore& operator=(const GeneratorRestore&) = delete;

 private:
  GeneratorState state_;
};

}  // namespace

namespace {

// The options with the topology's stage count (a different one given is an error).
PipelineModuleOptions with_stages(PipelineModuleOptions options, const ProcessTopology& topology) {
  const int64_t p = topology.dim("pipe");
  TS_CHECK(options.num_stages == 1 || options.num_stages == p, "PipelineModule: num_stages ",
           options.num_stages, " but the topology's \"pipe\" axis has ", p);
  options.num_stages = p;
  return options;
}

int64_t stage_in(const ProcessTopology& topology) {
  auto world = parallel::world();
  TS_CHECK(topology.world_size() == world->size(), "PipelineModule: the topology has ",
           topology.world_size(), " ranks, the job ", world->size());
  return topology.coords_of(world->rank()).at("pipe");
}

}  // namespace

PipelineModule::PipelineModule(std::vector<LayerSpec> specs, PipeLossFn loss_fn,
                               const ProcessTopology& topology, PipelineModuleOptions options)
    : PipelineModule(std::move(specs), std::move(loss_fn), stage_in(topology),
                     with_stages(std::move(options), topology)) {}

PipelineModule::PipelineModule(std::vector<LayerSpec> specs, PipeLossFn loss_fn, int64_t stage_id,
                               PipelineModuleOptions options)
    : specs_(std::move(specs)),
      loss_fn_(std::move(loss_fn)),
      stage_id_(stage_id),
      options_(std::move(options)) {
  const int64_t p = options_.num_stages, v = options_.virtual_stages, n = num_layers();
  TS_CHECK(p >= 1 && stage_id >= 0 && stage_id < p, "PipelineModule: stage ", stage_id, " of ", p,
           " stages");
  TS_CHECK(v >= 1, "PipelineModule: virtual_stages must be >= 1, got ", v);
  TS_CHECK(n >= p * v, "PipelineModule: ", n, " layers cannot fill ", p, " stages",
           v > 1 ? " x " + std::to_string(v) + " chunks" : std::string());
  for (int64_t i = 0; i < n; ++i)
    TS_CHECK(specs_[static_cast<size_t>(i)].build, "PipelineModule: layer ", i, " has no builder");
  TS_CHECK(options_.activation_checkpoint_interval >= 0,
           "PipelineModule: activation_checkpoint_interval must be >= 0, got ",
           options_.activation_checkpoint_interval);
  // Its buffers hold one forward's inputs; a stage holds several micro-batches' at once.
  TS_CHECK(
      !options_.checkpointing || !options_.checkpointing->options().contiguous_memory_optimization,
      "PipelineModule: activation_checkpointing.contiguous_memory_optimization keeps one "
      "forward's inputs, but a pipeline stage holds up to (stages - stage) micro-batches' "
      "at once; turn it off with a pipeline");
  GeneratorRestore restore;
  if (!options_.partition_bounds.empty()) {
    bounds_ = check_partition(options_.partition_bounds, n, p * v);
  } else {
    std::vector<LayerInfo> info;
    for (int64_t i = 0; i < n; ++i) {
      const LayerSpec& s = specs_[static_cast<size_t>(i)];
      int64_t params = 0;
      if (options_.partition_method == "parameters") {
        nn::Module scratch;  // (built to be counted, then dropped)
        params = s.build(&scratch, "count")->num_parameters();
      }
      info.push_back({s.type_name, params});
    }
    bounds_ = partition_layers(options_.partition_method, info, p * v);
  }
  positions_.resize(static_cast<size_t>(v));
  for (int64_t c = 0; c < v; ++c)
    for (int64_t i = bounds_[static_cast<size_t>(part_of(c))];
         i < bounds_[static_cast<size_t>(part_of(c) + 1)]; ++i)
      build_layer(c, i);
}

void PipelineModule::build_layer(int64_t chunk, int64_t i) {
  const LayerSpec& s = specs_[static_cast<size_t>(i)];
  auto& positions = positions_[static_cast<size_t>(chunk)];
  if (options_.seed_layers) manual_seed(options_.base_seed + static_cast<uint64_t>(i));
  if (s.tied_key.empty()) {
    layers_.push_back(s.build(this, std::to_string(i)));
    positions.push_back(layers_.back().get());
    return;
  }
  // The key's first stage owns the module (a parameter of that stage); the others hold a
  // copy outside the module tree, which the engine refreshes from the owner every batch and
  // whose gradients it sends there.
  const bool owner = tied_stages().at(s.tied_key).front() == stage_id_;
  nn::Module* parent = nullptr;
  if (owner) {
    if (!tied_modules_) tied_modules_ = std::make_unique<nn::Module>(this, "tied_modules");
    parent = tied_modules_.get();
  } else {
    if (!tied_copies_) tied_copies_ = std::make_unique<nn::Module>();
    parent = tied_copies_.get();
  }
  auto& module = tied_[s.tied_key];
  if (!module) module = s.build(parent, s.tied_key);
  positions.push_back(module.get());
}

PipeValue PipelineModule::forward(const PipeValue& x, int64_t chunk) {
  TS_CHECK(chunk >= 0 && chunk < virtual_stages(), "PipelineModule: chunk ", chunk, " of ",
           virtual_stages());
  nn::ModuleScope scope(*this);
  if (tied_copies_) tied_copies_->train(is_training());  // (outside the tree: set here)
  const auto& positions = positions_[static_cast<size_t>(chunk)];
  const int64_t k = options_.activation_checkpoint_interval;
  if (k <= 0) return forward_run(chunk, 0, positions.size(), x);
  if (options_.checkpointing) options_.checkpointing->begin_forward();
  PipeValue h = x;
  const auto& types = options_.checkpointable_layers;
  for (size_t begin = 0, end = 0; begin < positions.size(); begin = end) {
    // With checkpointable_layers, runs of k listed layers (the others alone, not checkpointed),
    // so a stage's blocks group as in one process; else k positions from the chunk's first.
    end = std::min(positions.size(), begin + static_cast<size_t>(k));
    if (!types.empty()) {
      end = begin + 1;
      while (listed(chunk, begin) && end < positions.size() &&
             end - begin < static_cast<size_t>(k) && listed(chunk, end))
        ++end;
    }
    if (!checkpointable(chunk, begin, end)) {
      h = forward_run(chunk, begin, end, h);
      continue;
    }
    // (captures `this` and the run by value: the rerun happens in backward)
    autograd::CheckpointFn run = [this, chunk, begin, end](const std::vector<Tensor>& in) {
      return forward_run(chunk, begin, end, in);
    };
    PipeValue in = h;
    if (grad_enabled() && std::none_of(h.begin(), h.end(), [](const Tensor& t) {
          return t.defined() && t.requires_grad();
        })) {
      // The run's inputs carry no gradient (the first stage's data): autograd records a
      // checkpoint only when one does, so an extra input that does (dropped before the run)
      // lets backward reach the rerun, which gives the run's parameters their gradients.
      in.push_back(zeros({}).requires_grad_(true));
      run = [run](const std::vector<Tensor>& x) { return run({x.begin(), x.end() - 1}); };
    }
    h = options_.checkpointing ? options_.checkpointing->checkpoint(run, in)
                               : autograd::checkpoint(run, in);
  }
  return h;
}

PipeValue PipelineModule::forward_run(int64_t chunk, size_t begin, size_t end, const PipeValue& x) {
  PipeValue h = x;
  const auto& positions = positions_[static_cast<size_t>(chunk)];
  const auto first = static_cast<size_t>(bounds_[static_cast<size_t>(part_of(chunk))]);
  for (size_t k = begin; k < end; ++k) {
    const LayerSpec& s = specs_[first + k];
    h = s.forward_fn ? s.forward_fn(*positions[k], h) : positions[k]->forward(h);
  }
  return h;
}

bool PipelineModule::listed(int64_t chunk, size_t position) const {
  const auto& types = options_.checkpointable_layers;
  return std::find(types.begin(), types.end(),
                   positions_[static_cast<size_t>(chunk)][position]->type_name()) != types.end();
}

bool PipelineModule::checkpointable(int64_t chunk, size_t begin, size_t end) const {
  const bool by_type = !options_.checkpointable_layers.empty();
  bool any_params = false;
  for (size_t k = begin; k < end; ++k) {
    if (by_type && !listed(chunk, k)) return false;
    any_params = any_params || positions_[static_cast<size_t>(chunk)][k]->num_parameters() > 0;
  }
  return by_type || any_params;
}

Tensor PipelineModule::loss(const PipeValue& outputs, const PipeValue& labels) const {
  TS_CHECK(loss_fn_, "PipelineModule: no loss_fn");
  return loss_fn_(outputs, labels);
}

std::map<std::string, std::vector<int64_t>> PipelineModule::tied_stages() const {
  // In layer order: the key's first stage comes first (its owner).
  std::map<std::string, std::vector<int64_t>> out;
  const int64_t parts = static_cast<int64_t>(bounds_.size()) - 1;
  for (int64_t part = 0; part < parts; ++part)
    for (int64_t i = bounds_[static_cast<size_t>(part)]; i < bounds_[static_cast<size_t>(part + 1)];
         ++i) {
      const std::string& key = specs_[static_cast<size_t>(i)].tied_key;
      const int64_t stage = part % options_.num_stages;
      if (!key.empty() && std::find(out[key].begin(), out[key].end(), stage) == out[key].end())
        out[key].push_back(stage);
    }
  return out;
}

std::vector<Tensor*> PipelineModule::tied_parameters(const std::string& key) {
  auto it = tied_.find(key);
  if (it == tied_.end()) return {};
  const LayerSpec* spec = nullptr;
  for (const LayerSpec& s : specs_)
    if (s.tied_key == key) spec = &s;
  std::vector<Tensor*> out;
  for (auto& [name, t] : it->second->named_parameters()) {
    const auto& w = spec->tied_weights;
    if (w.empty() || std::find(w.begin(), w.end(), name) != w.end()) out.push_back(t);
  }
  return out;
}

int64_t PipelineModule::layer_of(const std::string& param) const {
  const std::string tied = "tied_modules.";
  if (param.rfind(tied, 0) == 0) {
    const std::string key = param.substr(tied.size(), param.find('.', tied.size()) - tied.size());
    for (size_t i = 0; i < specs_.size(); ++i)
      if (specs_[i].tied_key == key) return static_cast<int64_t>(i);
  } else if (const size_t dot = param.find('.');
             dot != std::string::npos && dot > 0 && param.find_first_not_of("0123456789") == dot) {
    return std::stoll(param.substr(0, dot));
  }
  fail("PipelineModule: '", param, "' is not one of its parameters' names");
}

bool PipelineModule::holds(int64_t layer) const {
  for (int64_t c = 0; c < virtual_stages(); ++c)
    if (layer >= bounds_[static_cast<size_t>(part_of(c))] &&
        layer < bounds_[static_cast<size_t>(part_of(c) + 1)])
      return true;
  return false;
}

bool PipelineModule::saves(const std::string& param) const {
  return holds(layer_of(param));
}

std::string PipelineModule::saved_name(const std::string& param) const {
  return saved_names_ ? saved_names_(param) : param;
}

void PipelineModule::load_saved_state(const std::map<std::string, Tensor>& state, int tp_rank,
                                      int tp_size) {
  NoGradGuard no_grad;
  const TensorParallelLayout layout = tensor_parallel_layout(*this);
  for (auto& [name, t] : named_parameters()) {
    const std::string from = saved_name(name);
    auto it = state.find(from);
    auto split = layout.find(name);
    TS_CHECK(it != state.end(), "PipelineModule: '", name, "' has no counterpart '", from, "'");
    // (A tensor-parallel layer's parameter: this rank's shard of the whole one.)
    const Tensor value = split == layout.end()
                             ? it->second
                             : shard_of_whole(it->second, split->second, tp_rank, tp_size);
    TS_CHECK(value.shape() == t->shape(), "PipelineModule: '", name, "' ", shape_str(t->shape()),
             " has no counterpart '", from, "' of its shape (", it->second.describe(),
             split == layout.end() ? "" : ", sharded", ")");
    t->copy_(value);
  }
}

}  // namespace tessera::parallel
