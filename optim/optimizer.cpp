#include "tessera/optim/optimizer.h"

#include <cmath>
#include <functional>
#include <map>
#include <tuple>
#include <type_traits>
#include <variant>

#include "tessera/dispatch.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::optim {

std::vector<ParamGroup> default_param_groups(
    const std::vector<std::pair<std::string, Tensor*>>& named, double lr, double weight_decay,
    bool decay_1d) {
  ParamGroup decay{{}, {}, lr, weight_decay}, no_decay{{}, {}, lr, 0.0};
  for (auto& [name, t] : named) {
    ParamGroup& g = decay_1d || t->dim() >= 2 ? decay : no_decay;
    g.names.push_back(name);
    g.params.push_back(*t);
  }
  std::vector<ParamGroup> out;
  for (ParamGroup* g : {&decay, &no_decay})
    if (!g->params.empty()) out.push_back(std::move(*g));
  return out;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  size_t unnamed = 0;  // numbered across groups: state keys must not collide
  for (auto& g : groups_) {
    if (g.names.size() != g.params.size()) {
      g.names.clear();
      for (size_t i = 0; i < g.params.size(); ++i)
        g.names.push_back("param" + std::to_string(unnamed++));
    }
    for (size_t i = 0; i < g.params.size(); ++i) {
      TS_CHECK(g.params[i].is_leaf() && is_floating(g.params[i].dtype()), "optimizer: '",
               g.names[i], "' must be a floating-point leaf tensor, got ", g.params[i].describe());
    }
    TS_CHECK(g.lr >= 0 && g.weight_decay >= 0,
             "optimizer: lr and weight_decay must be >= 0, got lr=", g.lr,
             " weight_decay=", g.weight_decay);
  }
}

void Optimizer::zero_grad() {
  for (auto& g : groups_)
    for (auto& p : g.params) p.set_grad(Tensor());
}

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) g.lr = lr;
}

int64_t Optimizer::numel_of(const std::string& name) const {
  for (const ParamGroup& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i)
      if (g.names[i] == name) return g.params[i].numel();
  return -1;
}

Tensor& Optimizer::slot(size_t g, size_t i, const std::string& name) {
  const std::string key = groups_[g].names[i] + "." + name;
  auto it = state_.find(key);
  if (it == state_.end()) it = state_.emplace(key, zeros_like(groups_[g].params[i])).first;
  return it->second;
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out = state_;
  out["step"] = full({}, static_cast<double>(step_), DType::Int64);
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto it = state.find("step");
  TS_CHECK(it != state.end(), name(), ".load_state_dict: no 'step' entry");
  TS_CHECK(it->second.numel() == 1 && it->second.item() >= 0, name(),
           ".load_state_dict: 'step' must be one value >= 0, got ", it->second.describe());
  step_ = static_cast<int64_t>(it->second.item());
  std::map<std::string, Tensor> loaded;
  for (auto& [k, v] : state) {
    if (k == "step") continue;
    const size_t dot = k.rfind('.');
    bool known = false;
    for (auto& g : groups_)
      for (size_t i = 0; i < g.params.size(); ++i)
        if (dot != std::string::npos && k.substr(0, dot) == g.names[i]) {
          TS_CHECK(v.shape() == g.params[i].shape(), name(), ".load_state_dict: '", k,
                   "' has shape ", shape_str(v.shape()), ", parameter has ",
                   shape_str(g.params[i].shape()));
          TS_CHECK(is_floating(v.dtype()), name(), ".load_state_dict: '", k, "' is ",
                   dtype_name(v.dtype()), ", optimizer state is floating-point");
          loaded[k] = v.to(g.params[i].dtype()).to(g.params[i].device()).contiguous().clone();
          known = true;
        }
    TS_CHECK(known, name(), ".load_state_dict: '", k,
             "' belongs to no parameter of this optimizer");
  }
  state_ = std::move(loaded);
}

// Runs one fused optimizer kernel per (device, dtype) over each group's parameters that have
// gradients; `slots` names the state tensors the kernel updates after the parameters.
void Optimizer::set_model_copies(std::vector<std::vector<Tensor*>> copies) {
  TS_CHECK(copies.size() == groups_.size(), name(), ": model copies for ", copies.size(),
           " groups, the optimizer has ", groups_.size());
  for (size_t g = 0; g < copies.size(); ++g)
    TS_CHECK(copies[g].size() == groups_[g].params.size(), name(), ": group ", g, " has ",
             groups_[g].params.size(), " parameters but ", copies[g].size(), " model copies");
  model_copies_ = std::move(copies);
}

void Optimizer::run_fused(Kernel k, const std::vector<std::string>& slots,
                          const std::function<OptimizerStepParams(const ParamGroup&)>& params) {
  NoGradGuard no_grad;
  // One launch per (group, device, parameter dtype, gradient dtype); with a stager, per
  // sub-group of at most sub_group_size elements of it.
  struct Launch {
    size_t group;
    std::vector<size_t> idx;
  };
  std::vector<Launch> launches;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    ParamGroup& g = groups_[gi];
    Tensor* const* copies = model_copies_.empty() ? nullptr : model_copies_[gi].data();
    std::map<std::tuple<int, int, int>, std::vector<size_t>> by_kind;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor grad = copies ? copies[i]->grad() : g.params[i].grad();
      if (!grad.defined()) continue;
      TS_CHECK(grad.shape() == g.params[i].shape(), name(), ": gradient of '", g.names[i], "' is ",
               grad.describe(), ", parameter is ", g.params[i].describe());
      const DType gd = copies ? grad.dtype() : g.params[i].dtype();
      by_kind[{static_cast<int>(g.params[i].device().type), static_cast<int>(g.params[i].dtype()),
               static_cast<int>(gd)}]
          .push_back(i);
    }
    for (auto& [kind, idx] : by_kind)
      for (std::vector<size_t>& sub : sub_groups(g, idx)) launches.push_back({gi, std::move(sub)});
  }
  // (Prefetching takes the state that exists: a first step makes each sub-group's when it
  // updates it.)
  auto state_of = [&](const Launch& l, bool make) {
    std::vector<StateTensor> out;
    if (stager_->stages_params())
      for (size_t i : l.idx) out.push_back({groups_[l.group].names[i], groups_[l.group].params[i]});
    for (const std::string& s : slots)
      for (size_t i : l.idx) {
        std::string key = groups_[l.group].names[i] + "." + s;
        if (make || state_.count(key)) out.push_back({key, slot(l.group, i, s)});
      }
    return out;
  };
  // (What the first sub-group needs beyond what was read ahead of this step: the
  // gradients, for a stager that stages them.)
  if (stager_ && !launches.empty()) stager_->prefetch(state_of(launches[0], false));
  for (size_t li = 0; li < launches.size(); ++li) {
    std::vector<StateTensor> state;
    if (stager_) {
      state = state_of(launches[li], true);
      if (li + 1 < launches.size()) stager_->prefetch(state_of(launches[li + 1], false));
      stager_->acquire(state);
    }
    launch_fused(k, launches[li].group, launches[li].idx, slots, params);
    if (stager_) stager_->release(state);
  }
  if (!stager_) return;
  stager_->finish();
  // The next step's first sub-groups, read (pipeline_read) while the forward and backward in
  // between run, as far as the staging allows.
  for (const Launch& l : launches)
    if (!stager_->prefetch(state_of(l, false))) break;
}

void Optimizer::initialize_state() {
  NoGradGuard no_grad;
  const std::vector<std::string> slots = slot_names();
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    std::vector<size_t> all(g.params.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    for (const std::vector<size_t>& sub : sub_groups(g, all)) {
      std::vector<StateTensor> state;
      for (size_t i : sub)
        for (const std::string& s : slots) state.push_back({g.names[i] + "." + s, slot(gi, i, s)});
      if (stager_) stager_->release(state);
    }
  }
  if (stager_) stager_->finish();
}

std::vector<std::vector<size_t>> Optimizer::sub_groups(const ParamGroup& g,
                                                       const std::vector<size_t>& idx) const {
  if (!stager_) return {idx};
  std::vector<std::vector<size_t>> out;
  int64_t numel = 0;
  for (size_t i : idx) {
    if (out.empty() || (numel > 0 && numel + g.params[i].numel() > stager_->sub_group_size())) {
      out.emplace_back();
      numel = 0;
    }
    out.back().push_back(i);
    numel += g.params[i].numel();
  }
  return out;
}

void Optimizer::launch_fused(Kernel k, size_t gi, const std::vector<size_t>& idx,
                             const std::vector<std::string>& slots,
                             const std::function<OptimizerStepParams(const ParamGroup&)>& params) {
  ParamGroup& g = groups_[gi];
  Tensor* const* copies = model_copies_.empty() ? nullptr : model_copies_[gi].data();
  auto grad_of = [&](size_t i) { return copies ? copies[i]->grad() : g.params[i].grad(); };
  std::vector<TensorBase> outs, grads;
  for (size_t i : idx) outs.push_back(g.params[i].detach());
  for (const std::string& s : slots)
    for (size_t i : idx) outs.push_back(slot(gi, i, s));
  if (copies)
    for (size_t i : idx) outs.push_back(copies[i]->detach());
  for (size_t i : idx)
    grads.push_back(copies ? grad_of(i).contiguous()
                           : grad_of(i).to(g.params[i].dtype()).contiguous());
  KernelAttrs a;
  a.optimizer_step = params(g);
  std::visit(
      [&]<class P>(P& p) {
        if constexpr (!std::is_same_v<P, std::monostate>) p.grad_scale = grad_scale_;
      },
      a.optimizer_step);
  const Tensor& first = g.params[idx[0]];
  TS_CHECK(first.is_contiguous(), name(), ": parameter '", g.names[idx[0]], "' is not contiguous");
  run_kernel(k, first.device(), first.dtype(), grads, outs, a);
  for (size_t i : idx) g.params[i].bump_version();
  if (copies)
    for (size_t i : idx) copies[i]->bump_version();
}

namespace {

// Adam's bias corrections 1 - beta^t (1 when disabled).
std::pair<double, double> bias_corrections(double beta1, double beta2, int64_t step, bool enabled) {
  if (!enabled) return {1.0, 1.0};
  return {1 - std::pow(beta1, static_cast<double>(step)),
          1 - std::pow(beta2, static_cast<double>(step))};
}

}  // namespace

std::unique_ptr<Optimizer> Optimizer::rebuild(std::vector<ParamGroup>) const {
  fail("optimizer ", name(),
       " cannot be rebuilt over the engine's parameter groups (float32 masters with mixed "
       "precision, partitions with ZeRO): override Optimizer::rebuild, or pass a factory "
       "(InitializeOptions::optimizer_factory)");
}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options)
    : Optimizer(std::move(groups)), options_(options) {
  TS_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
           "Adam: betas must be in [0, 1), got (", options.beta1, ", ", options.beta2, ")");
  TS_CHECK(options.eps > 0, "Adam: eps must be > 0, got ", options.eps);
}

void Adam::step() {
  ++step_;
  // (Plain variables: clang 14 cannot capture structured bindings in the lambda below.)
  const auto bc = bias_corrections(options_.beta1, options_.beta2, step_, options_.bias_correction);
  const double bc1 = bc.first, bc2 = bc.second;
  run_fused(Kernel::adamw_step, {"exp_avg", "exp_avg_sq"}, [&](const ParamGroup& g) {
    AdamWStepParams p;
    p.lr = g.lr;
    p.beta1 = options_.beta1;
    p.beta2 = options_.beta2;
    p.eps = options_.eps;
    p.weight_decay = g.weight_decay;
    p.bias_correction1 = bc1;
    p.bias_correction2 = bc2;
    p.decoupled = options_.decoupled_weight_decay;
    return p;
  });
}

namespace {
void check_betas(const char* who, double beta1, double beta2) {
  TS_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, who,
           ": betas must be in [0, 1), got (", beta1, ", ", beta2, ")");
}
}  // namespace

bool Adam::set_betas(double beta1, double beta2) {
  check_betas("Adam", beta1, beta2);
  options_.beta1 = beta1;
  options_.beta2 = beta2;
  return true;
}

bool Lamb::set_betas(double beta1, double beta2) {
  check_betas("Lamb", beta1, beta2);
  options_.beta1 = beta1;
  options_.beta2 = beta2;
  return true;
}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer(std::move(groups)), options_(options) {
  TS_CHECK(options.momentum >= 0, "SGD: momentum must be >= 0, got ", options.momentum);
  TS_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
           "SGD: nesterov needs momentum > 0 and dampening 0");
}

void SGD::step() {
  const bool first = step_ == 0;
  ++step_;
  std::vector<std::string> slots;
  if (options_.momentum != 0) slots.push_back("momentum_buffer");
  run_fused(Kernel::sgd_step, slots, [&](const ParamGroup& g) {
    SgdStepParams p;
    p.lr = g.lr;
    p.momentum = options_.momentum;
    p.dampening = options_.dampening;
    p.weight_decay = g.weight_decay;
    p.nesterov = options_.nesterov;
    p.first_step = first;
    return p;
  });
}

Lamb::Lamb(std::vector<ParamGroup> groups, LambOptions options)
    : Optimizer(std::move(groups)), options_(options) {
  TS_CHECK(options.min_coeff >= 0 && options.max_coeff >= options.min_coeff,
           "Lamb: need 0 <= min_coeff <= max_coeff, got ", options.min_coeff, " and ",
           options.max_coeff);
}

void Lamb::step() {
  ++step_;
  // (Plain variables: clang 14 cannot capture structured bindings in the lambda below.)
  const auto bc = bias_corrections(options_.beta1, options_.beta2, step_, options_.bias_correction);
  const double bc1 = bc.first, bc2 = bc.second;
  run_fused(Kernel::lamb_step, {"exp_avg", "exp_avg_sq"}, [&](const ParamGroup& g) {
    LambStepParams p;
    p.lr = g.lr;
    p.beta1 = options_.beta1;
    p.beta2 = options_.beta2;
    p.eps = options_.eps;
    p.weight_decay = g.weight_decay;
    p.bias_correction1 = bc1;
    p.bias_correction2 = bc2;
    p.max_coeff = options_.max_coeff;
    p.min_coeff = options_.min_coeff;
    return p;
  });
}

double sum_of_squares(const std::vector<Tensor>& tensors) {
  NoGradGuard no_grad;
  std::map<std::pair<std::string, DType>, std::vector<Tensor>> groups;
  for (const Tensor& t : tensors) groups[{t.device().str(), t.dtype()}].push_back(t);
  double total = 0.0;
  for (const auto& [key, group] : groups) total += sum(sum_squares(group)).item();
  return total;
}

double norm_from_squares(double squares, bool float64_gradients) {
  // Like torch's clip_grad_norm_, the norm has the gradients' precision (float32 for float32
  // and 16-bit gradients): data-parallel ranks whose gradients differ in the last bits then
  // agree on the clipping coefficient instead of drifting apart through it.
  const double norm = std::sqrt(squares);
  return float64_gradients ? norm : static_cast<double>(static_cast<float>(norm));
}

double grad_norm(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  bool all_double = true;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    all_double = all_double && g.dtype() == DType::Float64;
    grads.push_back(std::move(g));
  }
  return norm_from_squares(sum_of_squares(grads), all_double);
}

double clip_coefficient(double norm, double max_norm) {
  return std::min(1.0, max_norm / (norm + 1e-6));
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  TS_CHECK(max_norm > 0, "clip_grad_norm: max_norm must be > 0, got ", max_norm);
  const double total = grad_norm(params);
  if (!std::isfinite(total)) return total;
  const double coef = clip_coefficient(total, max_norm);
  if (coef < 1.0) {
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) g.mul_(coef);
    }
  }
  return total;
}

}  // namespace tessera::optim
