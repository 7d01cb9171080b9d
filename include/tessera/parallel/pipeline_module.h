// DeepSpeed's PipelineModule in C++: a model given as a list of layer specifications, split
// among pipeline stages, each stage building only its own layers.
//
//   std::vector<parallel::LayerSpec> specs{
//       parallel::LayerSpec::of<Embed>("Embed", vocab, dim),
//       parallel::LayerSpec::of<Block>("Block", dim), parallel::LayerSpec::of<Block>("Block", dim),
//       parallel::LayerSpec::of<Head>("Head", dim, vocab)};
//   parallel::PipelineModule model(specs, loss_fn, stage_id, {.num_stages = 2,
//                                                              .partition_method = "type:block"});
//
// Layers pass one value from one to the next: a tuple of tensors (PipeValue), as DeepSpeed's
// layers pass a tensor or a tuple. A layer is a PipeLayer (or an nn::UnaryModule wrapped by
// LayerSpec::unary). A TiedLayerSpec (LayerSpec::tied) names a key: every position with that
// key uses one module (built on each stage that holds one of them), optionally through its own
// forward function (GPT-2's embedding reused as the LM head). The key's first stage owns it (its
// parameters are that stage's); the other stages hold a copy that is not a parameter of theirs:
// the engine sends the copies' gradients to the owner, which steps, and refreshes the copies
// from it every batch. With seed_layers, layer i is built right after
// manual_seed(base_seed + i), so any split builds the same weights as one process.
// With activation_checkpoint_interval k > 0, a stage runs its layers in checkpoints (their
// activations freed, recomputed in backward with the same dropout): as DeepSpeed, runs of k
// positions from the stage's first, each checkpointed when some layer in it has parameters;
// with checkpointable_layers (type names), runs of up to k consecutive layers of those types
// (the layers of other types run alone, not checkpointed), so a stage's transformer blocks
// group as in one process wherever the stage boundaries fall. The checkpoints go through
// `checkpointing` (the config's activation_checkpointing section) when given.
// With virtual_stages v > 1 (the interleaved schedule's virtual stages) the layers split into
// p x v parts and stage s builds parts s, s + p, ...; forward(x, c) runs its chunk c.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/pipe_partition.h"
#include "tessera/parallel/topology.h"

namespace tessera::parallel {

using PipeValue = std::vector<Tensor>;

class PipeLayer : public nn::Module {
 public:
  using nn::Module::Module;
  virtual PipeValue forward(const PipeValue& x) = 0;
};

struct LayerSpec {
  std::string type_name;  // what partition_method "type:REGEX" matches
  std::function<std::unique_ptr<PipeLayer>(nn::Module* parent, const std::string& name)> build;
  // TiedLayerSpec: the key shared by its positions, the tied parameters (by name in the
  // module; empty: all of them), and the forward used at this position (empty: the layer's).
  std::string tied_key;
  std::vector<std::string> tied_weights;
  std::function<PipeValue(PipeLayer&, const PipeValue&)> forward_fn;

  // L(parent, name, args...) for a PipeLayer L.
  template <class L, class... Args>
  static LayerSpec of(std::string type_name, Args... args) {
    return {std::move(type_name),
            [=](nn::Module* parent, const std::string& name) -> std::unique_ptr<PipeLayer> {
              return std::make_unique<L>(parent, name, args...);
            }};
  }
  // An nn::UnaryModule M(parent, name, args...) on the value's single tensor.
  template <class M, class... Args>
  static LayerSpec unary(std::string type_name, Args... args);
  template <class L, class... Args>
  static LayerSpec tied(std::string key, std::vector<std::string> tied_weights,
                        std::function<PipeValue(PipeLayer&, const PipeValue&)> forward_fn,
                        std::string type_name, Args... args) {
    LayerSpec s = of<L>(std::move(type_name), args...);
    s.tied_key = std::move(key);
    s.tied_weights = std::move(tied_weights);
    s.forward_fn = std::move(forward_fn);
    return s;
  }
};

// A UnaryModule as a PipeLayer (LayerSpec::unary).
template <class M>
class UnaryPipeLayer : public PipeLayer {
 public:
  template <class... Args>
  UnaryPipeLayer(nn::Module* parent, const std::string& name, Args... args)
      : PipeLayer(parent, name), inner_(this, "inner", args...) {}
  PipeValue forward(const PipeValue& x) override { return {inner_.forward(x.at(0))}; }
  std::string type_name() const override { return inner_.type_name(); }
  M& inner() { return inner_; }

 private:
  M inner_;
};

template <class M, class... Args>
LayerSpec LayerSpec::unary(std::string type_name, Args... args) {
  return of<UnaryPipeLayer<M>>(std::move(type_name), args...);
}

// The loss of the last stage's output against the micro-batch's labels.
using PipeLossFn = std::function<Tensor(const PipeValue& outputs, const PipeValue& labels)>;

struct PipelineModuleOptions {
  int64_t num_stages = 1;
  // Model chunks per stage (pipeline.virtual_stages: Megatron's virtual pipeline stages, for
  // the interleaved schedule):
  // the layers split into num_stages x virtual_stages parts, stage s holding parts s, s + p, ...
  int64_t virtual_stages = 1;
  std::string partition_method = "parameters";  // DeepSpeed's default
  std::vector<int64_t> partition_bounds;        // explicit (parts + 1), else the method
  bool seed_layers = false;
  uint64_t base_seed = 1234;
  int64_t activation_checkpoint_interval = 0;      // 0: no checkpoints
  std::vector<std::string> checkpointable_layers;  // type names; empty: runs with parameters
  // Where checkpoints go (its options: cpu_checkpointing, profile...); null: plain ones.
  std::shared_ptr<ActivationCheckpointing> checkpointing;
};

class PipelineModule : public nn::Module {
 public:
  PipelineModule(std::vector<LayerSpec> specs, PipeLossFn loss_fn, int64_t stage_id,
                 PipelineModuleOptions options = {});
  // DeepSpeed's PipelineModule(topology=...): the stages are the topology's "pipe" axis
  // (options.num_stages, if not 1, must equal it) and this process's stage its coordinate.
  PipelineModule(std::vector<LayerSpec> specs, PipeLossFn loss_fn, const ProcessTopology& topology,
                 PipelineModuleOptions options = {});
  // This stage's layers of model chunk `chunk` on `x` (the previous part's output, or the
  // micro-batch's inputs).
  PipeValue forward(const PipeValue& x, int64_t chunk = 0);
  Tensor loss(const PipeValue& outputs, const PipeValue& labels) const;
  int64_t num_stages() const { return options_.num_stages; }
  const PipelineModuleOptions& options() const { return options_; }
  int64_t stage_id() const { return stage_id_; }
  int64_t virtual_stages() const { return options_.virtual_stages; }
  // Every part's layers: part c * num_stages + s is stage s's chunk c.
  const std::vector<int64_t>& bounds() const { return bounds_; }
  int64_t part_of(int64_t chunk) const { return chunk * num_stages() + stage_id_; }
  int64_t num_layers() const { return static_cast<int64_t>(specs_.size()); }
  // Tied keys: the stages holding a position of each, and this stage's tied parameters (its
  // own or its copy's).
  std::map<std::string, std::vector<int64_t>> tied_stages() const;
  std::vector<Tensor*> tied_parameters(const std::string& key);
  // Checkpoints: the layer a parameter ("3.fc.weight", "tied_modules.embed.wte.weight")
  // belongs to (a tied module's: its key's first position), whether this stage saves it (a
  // tied module on any but its first stage does not), and the name it is saved under: its
  // own, or what set_saved_names gives (e.g. the whole model's, so one process loads it).
  int64_t layer_of(const std::string& param) const;
  bool saves(const std::string& param) const;
  std::string saved_name(const std::string& param) const;
  void set_saved_names(std::function<std::string(const std::string&)> names) {
    saved_names_ = std::move(names);
  }
  // This stage's parameters from `state` under their saved names (e.g. the whole model's
  // state_dict); a missing or mis-shaped entry is an error naming both names. With
  // tensor-parallel layers (3D), each of their parameters takes rank tp_rank's shard of the
  // whole one (of tp_size ranks).
  void load_saved_state(const std::map<std::string, Tensor>& state, int tp_rank = 0,
                        int tp_size = 1);
  // The architecture saved with checkpoints (nn::Module::config_json), e.g. GPT-2's.
  std::string config_json() const override { return config_json_; }
  void set_config_json(std::string json) { config_json_ = std::move(json); }

 private:
  std::vector<LayerSpec> specs_;
  PipeLossFn loss_fn_;
  int64_t stage_id_;
  PipelineModuleOptions options_;
  std::vector<int64_t> bounds_;
  std::unique_ptr<nn::Module> tied_modules_;  // "tied_modules.<key>": the keys this stage owns
  std::unique_ptr<nn::Module> tied_copies_;   // the other keys' copies (not parameters here)
  std::map<std::string, std::unique_ptr<PipeLayer>> tied_;
  std::vector<std::unique_ptr<PipeLayer>> layers_;  // this stage's untied ones, by position
  std::vector<std::vector<PipeLayer*>> positions_;  // per chunk: its layer at each position
  std::function<std::string(const std::string&)> saved_names_;
  std::string config_json_;

  // Positions [begin, end) of a chunk on h; checkpointed when the run qualifies.
  PipeValue forward_run(int64_t chunk, size_t begin, size_t end, const PipeValue& h);
  bool checkpointable(int64_t chunk, size_t begin, size_t end) const;
  bool listed(int64_t chunk, size_t position) const;  // its type is in checkpointable_layers
  bool holds(int64_t layer) const;                    // in one of this stage's parts
  void build_layer(int64_t chunk, int64_t layer);
};

}  // namespace tessera::parallel
