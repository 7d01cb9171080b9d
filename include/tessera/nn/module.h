// Module: a node in a tree of named parameters, buffers and submodules. A submodule or
// parameter registers itself with its owner when constructed, so names are discovered with
// no hand-written registry:
//
//   struct MLP : nn::Module {
//     nn::Linear fc1{this, "fc1", 784, 256}, fc2{this, "fc2", 256, 10};
//     Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
//   };
//
// Dotted names ("fc1.weight") are the keys of state_dict, checkpoints, tensor parallelism
// and ZeRO. Modules are neither copyable nor movable: children point at their parents.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::nn {

class Module {
 public:
  Module() = default;  // a root module
  Module(Module* parent, std::string name);
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& name() const { return name_; }
  // The class's name ("GPT2Block"), for summaries and the flops profiler's tree; by default
  // the dynamic type's name without its namespaces.
  virtual std::string type_name() const;
  // A JSON description of the architecture that rebuilds it (the built-in models: their HF
  // config.json), saved with checkpoints; empty when the model has none.
  virtual std::string config_json() const { return {}; }

  // Recursive, in registration order, with dotted names relative to this module.
  std::vector<std::pair<std::string, Tensor*>> named_parameters();
  std::vector<std::pair<std::string, Tensor*>> named_buffers(bool persistent_only = false);
  std::vector<Tensor> parameters();
  std::vector<std::pair<std::string, Module*>> named_children() const;
  int64_t num_parameters();

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves/casts parameters and buffers (floating ones only for dtype) in place.
  void to(Device device);
  void to(DType dtype);
  void zero_grad();

  // Parameters and persistent buffers by dotted name (tensors share storage with the model).
  std::map<std::string, Tensor> state_dict();
  // Copies values in. strict: missing or unexpected keys are errors (all are listed). A
  // shape mismatch is always an error naming the key and both shapes.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);

  // One line per parameter: name, shape, dtype, count; then the total.
  std::string summary();

  // Re-initialises this module's own parameters (submodules do their own).
  virtual void reset_parameters() {}

  // Registration, used by layers and by nn::Parameter. The pointer must stay valid for the
  // module's lifetime (it is a member of the module).
  Tensor& register_parameter(const std::string& name, Tensor* slot, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor* slot, Tensor value,
                          bool persistent = true);

 private:
  void register_child(const std::string& name, Module* child);
  friend class ModuleList;

  std::string name_;
  bool training_ = true;
  std::vector<std::pair<std::string, Tensor*>> params_;
  struct Buffer {
    std::string name;
    Tensor* slot;
    bool persistent;
  };
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
};

// A parameter declared as a member: `nn::Parameter scale{this, "scale", ones({4})};`
class Parameter {
 public:
  Parameter(Module* owner, const std::string& name, Tensor init);
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;
  const Tensor& get() const { return value_; }
  Tensor& get() { return value_; }
  operator const Tensor&() const { return value_; }

 private:
  Tensor value_;
};

}  // namespace tessera::nn
