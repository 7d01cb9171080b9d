// The optimizer registry: every "optimizer.type" a config can name (DeepSpeed's Adam, AdamW,
// SGD and Lamb, and any a program registers), each an entry holding its parameter schema
// (name, kind of value, default, one-line doc) and its factory. The config reader (io/)
// checks an optimizer section against the entry, the engine builds the optimizer through it,
// the memory estimate reads its state size, and `tessera optimizers` / docs/training.md's
// table print it: a default is written once, here (read from the optimizer's options struct).
//
//   const optim::OptimizerEntry& e = optim::find_optimizer("Lamb");
//   auto opt = e.build(groups, e.values({{"betas", {0.9, 0.98}}}));
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/optim/hyper_param.h"
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

struct OptimizerEntry {
  std::string type;  // optimizer.type, DeepSpeed's name
  std::string doc;
  // optimizer.params. Registering adds lr, weight_decay (each parameter group's defaults) and
  // weight_decay_1d (Tessera's grouping: decay biases and norm weights too) when absent.
  std::vector<HyperParam> params;
  bool has_betas = false;          // an LR schedule may cycle its beta1 (OneCycle)
  bool updates_partitions = true;  // false: it needs whole tensors (LAMB's trust ratio): no ZeRO
  std::string no_zero_reason;      // why not under ZeRO, when updates_partitions is false
  // Float32 state tensors per parameter (Adam's two moments): the memory estimate's figure.
  std::function<int64_t(const HyperParamValues&)> state_slots;
  // Checks a section's values together (throws on a bad combination; the config reader
  // reports it naming the file) and returns warnings, each a sentence naming the key; may be
  // empty.
  std::function<std::vector<std::string>(const HyperParamValues&)> check;
  // The optimizer over the engine's groups (whose lr and weight decay are already set).
  std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>, const HyperParamValues&)> build;
  const HyperParam* find(const std::string& name) const { return find_hyper_param(params, name); }
  // The section's values over this entry's defaults.
  HyperParamValues values(HyperParamGiven given = {}) const {
    return HyperParamValues("optimizer", type, params, std::move(given));
  }
};

// The entry of `type`; an unknown one is an error listing the registered types.
const OptimizerEntry& find_optimizer(const std::string& type);
bool has_optimizer(const std::string& type);
std::vector<std::string> registered_optimizers();  // in registration order
std::string registered_optimizer_list();           // "Adam, AdamW, SGD, Lamb" for messages
void register_optimizer(OptimizerEntry entry);     // a type registered twice is an error

}  // namespace tessera::optim
