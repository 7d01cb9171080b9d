#include "tessera/optim/optimizer_registry.h"

#include "onebit_entries.h"
#include "tessera/named_registry.h"

namespace tessera::optim {

namespace {

using K = HyperParamKind;

double flag(bool b) {
  return b ? 1.0 : 0.0;
}

// Every optimizer's: the parameter groups' defaults and Tessera's grouping switch.
std::vector<HyperParam> group_params() {
  const ParamGroup g;
  return {{"lr", K::Lr, {g.lr}, "the learning rate (a parameter group's own wins)"},
          {"weight_decay", K::NonNegative, {g.weight_decay}, "weight decay"},
          {"weight_decay_1d",
           K::Bool,
           {0.0},
           "Tessera's: decay biases and norm weights too (default: >= 2-D parameters only)"}};
}

// A built-in optimizer's constructor checks its options together (SGD's nesterov needs
// momentum, LAMB's clamps are ordered): built over no parameters, it speaks at config time.
void check_by_building(OptimizerEntry& e) {
  if (e.check) return;
  e.check = [build = e.build](const HyperParamValues& v) {
    build({}, v);
    return std::vector<std::string>{};
  };
}

OptimizerEntry with_group_params(OptimizerEntry e) {
  std::vector<HyperParam> params;
  for (HyperParam& p : group_params())
    if (!e.find(p.name)) params.push_back(std::move(p));
  for (HyperParam& p : e.params) params.push_back(std::move(p));
  e.params = std::move(params);
  if (!e.updates_partitions && e.no_zero_reason.empty())
    e.no_zero_reason = "its update needs whole tensors";
  return e;
}

const char* const kTorchAdam = "Tessera has one fused Adam kernel";

// Adam's and LAMB's moment parameters, with the defaults of their options struct.
template <class Options>
std::vector<HyperParam> moment_params() {
  const Options o;
  return {
      {"betas", K::Betas, {o.beta1, o.beta2}, "the moments' decay rates"},
      {"eps", K::Positive, {o.eps}, "added to the second moment's root"},
      {"bias_correction", K::Bool, {flag(o.bias_correction)}, "divide the moments by 1 - beta^t"}};
}

std::vector<HyperParam> adam_params(const char* adam_w_mode_doc) {
  std::vector<HyperParam> params = moment_params<AdamOptions>();
  params.push_back(
      {"adam_w_mode", K::Bool, {flag(AdamOptions().decoupled_weight_decay)}, adam_w_mode_doc});
  params.push_back(
      {"torch_adam", K::Bool, {0.0}, "DeepSpeed's choice of kernel", false, kTorchAdam});
  return params;
}

OptimizerEntry adam_entry(const std::string& type) {
  const bool adamw = type == "AdamW";
  OptimizerEntry e;
  e.type = type;
  e.doc = adamw ? "Adam with decoupled weight decay (DeepSpeed's FusedAdam, adam_w_mode on)"
                : "Adam; decoupled weight decay unless adam_w_mode is false (then L2, added to "
                  "the gradient), as DeepSpeed's FusedAdam";
  e.params = adam_params(adamw ? "always true for AdamW (use type Adam for L2 decay)"
                               : "decoupled weight decay (false: L2)");
  e.has_betas = true;
  e.state_slots = [](const HyperParamValues&) { return int64_t{2}; };
  if (adamw)
    e.check = [](const HyperParamValues& v) {
      std::vector<std::string> out;
      if (v.given("adam_w_mode") && !v.flag("adam_w_mode"))
        out.push_back(
            "'optimizer.params.adam_w_mode' false has no effect with type AdamW, which "
            "is always decoupled (use type Adam for L2 decay)");
      return out;
    };
  e.build = [adamw](std::vector<ParamGroup> groups, const HyperParamValues& v) {
    const auto [b1, b2] = v.pair("betas");
    AdamOptions o{b1, b2, v.number("eps"), adamw || v.flag("adam_w_mode"),
                  v.flag("bias_correction")};
    return std::unique_ptr<Optimizer>(std::make_unique<Adam>(std::move(groups), o));
  };
  return e;
}

OptimizerEntry sgd_entry() {
  const SGDOptions o;
  OptimizerEntry e;
  e.type = "SGD";
  e.doc = "stochastic gradient descent with optional (Nesterov) momentum, as torch.optim.SGD";
  e.params = {{"momentum", K::NonNegative, {o.momentum}, "momentum factor (0: none)"},
              {"dampening", K::NonNegative, {o.dampening}, "dampening of the momentum"},
              {"nesterov", K::Bool, {flag(o.nesterov)}, "Nesterov momentum (needs momentum > 0)"}};
  e.state_slots = [](const HyperParamValues& v) {
    return int64_t{v.number("momentum") != 0 ? 1 : 0};
  };
  e.build = [](std::vector<ParamGroup> groups, const HyperParamValues& v) {
    SGDOptions o{v.number("momentum"), v.number("dampening"), v.flag("nesterov")};
    return std::unique_ptr<Optimizer>(std::make_unique<SGD>(std::move(groups), o));
  };
  return e;
}

OptimizerEntry lamb_entry() {
  const LambOptions o;
  OptimizerEntry e;
  e.type = "Lamb";
  e.doc =
      "LAMB: Adam's update scaled per tensor by a clamped trust ratio (DeepSpeed's "
      "FusedLamb)";
  e.params = moment_params<LambOptions>();
  e.params.push_back({"max_coeff", K::NonNegative, {o.max_coeff}, "the trust ratio's upper clamp"});
  e.params.push_back({"min_coeff", K::NonNegative, {o.min_coeff}, "the trust ratio's lower clamp"});
  e.has_betas = true;
  e.updates_partitions = false;
  e.no_zero_reason = "its update needs whole tensors (LAMB's trust ratio)";
  e.state_slots = [](const HyperParamValues&) { return int64_t{2}; };
  e.build = [](std::vector<ParamGroup> groups, const HyperParamValues& v) {
    const auto [b1, b2] = v.pair("betas");
    LambOptions o{b1,
                  b2,
                  v.number("eps"),
                  v.number("max_coeff"),
                  v.number("min_coeff"),
                  v.flag("bias_correction")};
    return std::unique_ptr<Optimizer>(std::make_unique<Lamb>(std::move(groups), o));
  };
  return e;
}

std::vector<OptimizerEntry> builtin_optimizers() {
  std::vector<OptimizerEntry> out;
  for (OptimizerEntry e : {adam_entry("Adam"), adam_entry("AdamW"), sgd_entry(), lamb_entry(),
                           onebit_adam_entry(), zero_one_adam_entry(), onebit_lamb_entry()}) {
    check_by_building(e);
    out.push_back(with_group_params(std::move(e)));
  }
  return out;
}

NamedRegistry<OptimizerEntry>& optimizer_registry() {
  static NamedRegistry<OptimizerEntry> r("optimizer type", builtin_optimizers());
  return r;
}

}  // namespace

const OptimizerEntry& find_optimizer(const std::string& type) {
  return optimizer_registry().find(type);
}
bool has_optimizer(const std::string& type) {
  return optimizer_registry().has(type);
}
std::vector<std::string> registered_optimizers() {
  return optimizer_registry().types();
}
std::string registered_optimizer_list() {
  return optimizer_registry().list();
}
void register_optimizer(OptimizerEntry entry) {
  TS_CHECK(entry.state_slots, "optim::register_optimizer: '", entry.type,
           "' needs a state_slots function (the memory estimate reads it)");
  optimizer_registry().add(with_group_params(std::move(entry)), "optim::register_optimizer");
}

}  // namespace tessera::optim
