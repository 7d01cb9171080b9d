#include "tessera/optim/zero_one_adam.h"

#include <algorithm>
#include <cmath>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::optim {

namespace {

// The schedule's state in state_dict(), beside the parameters' slots.
const char* const kCounters[] = {"var_interval", "var_counter", "local_step_interval",
                                 "local_step_counter", "allreduce"};
const std::string kZeroOnePrefix = "zero_one_adam.";

}  // namespace

ZeroOneAdam::ZeroOneAdam(std::vector<ParamGroup> groups, ZeroOneAdamOptions options,
                         std::shared_ptr<OneBitTransport> transport)
    : OneBitOptimizer(std::move(groups), "ZeroOneAdam", options.beta1, options.beta2, options.eps,
                      std::move(transport)),
      options_(options) {
  TS_CHECK(options.var_freeze_step >= 0 && options.var_update_scaler >= 1 &&
               options.local_step_scaler >= 1 && options.local_step_clipper >= 1,
           "ZeroOneAdam: var_freeze_step must be >= 0 and var_update_scaler, local_step_scaler "
           "and local_step_clipper >= 1, got ",
           options.var_freeze_step, ", ", options.var_update_scaler, ", ",
           options.local_step_scaler, ", ", options.local_step_clipper);
  lrs_.assign(groups_.size(), 0.0);
}

ZeroOneAdam::Pending ZeroOneAdam::pending_update(size_t g, size_t i, const Tensor& grad_tensor) {
  const ParamGroup& group = groups_[g];
  TS_CHECK(grad_tensor.shape() == group.params[i].shape(), "ZeroOneAdam: gradient of '",
           group.names[i], "' is ", grad_tensor.describe(), ", parameter is ",
           group.params[i].describe());
  return {g, i, grad_tensor, {}};
}

void ZeroOneAdam::moments(Pending& t, bool frozen) {
  const int64_t n = t.grad.numel();
  float* m = slot(t.g, t.i, "exp_avg").data<float>();
  float* v = slot(t.g, t.i, "exp_avg_sq").data<float>();
  // (float32 arithmetic, as DeepSpeed's on float32 tensors; 1 - beta as torch's add_ takes it)
  const float b1 = static_cast<float>(beta1_), b2 = static_cast<float>(beta2_);
  const float c1 = static_cast<float>(1 - beta1_), c2 = static_cast<float>(1 - beta2_);
  const float scale = static_cast<float>(grad_scale_);
  const Tensor grad = t.grad.to(DType::Float32).contiguous();  // (one tensor's copy at a time)
  const float* gr = grad.data<float>();
  if (!t.averaged.empty()) {  // this rank's own gradients, averaged by the 1-bit all-reduce
    for (int64_t k = 0; k < n; ++k) m[k] = b1 * m[k] + c1 * t.averaged[k];
  } else if (frozen) {
    for (int64_t k = 0; k < n; ++k) m[k] = b1 * m[k] + c1 * (gr[k] * scale);
  } else if (step_ % counters_.var_interval == 0) {  // the engine averaged this step's gradients
    for (int64_t k = 0; k < n; ++k) {
      const float gk = gr[k] * scale;
      v[k] = b2 * v[k] + c2 * gk * gk;
      m[k] = b1 * m[k] + c1 * gk;
    }
  }
}

void ZeroOneAdam::local_update(const Pending& t, bool frozen, bool reconciling) {
  const ParamGroup& group = groups_[t.g];
  const int64_t n = group.params[t.i].numel();
  float* p = group.params[t.i].data<float>();
  const float* m = slot(t.g, t.i, "exp_avg").data<float>();
  const float* v = slot(t.g, t.i, "exp_avg_sq").data<float>();
  float* acc = slot(t.g, t.i, "momentum_accumulator").data<float>();
  const float lr = static_cast<float>(group.lr), wd = static_cast<float>(group.weight_decay);
  const float eps = static_cast<float>(options_.eps);
  for (int64_t k = 0; k < n; ++k) {
    float u = m[k] / (std::sqrt(v[k]) + eps);
    if (wd > 0) u += wd * p[k];
    p[k] += -lr * u;
    if (frozen) acc[k] += -lr * u;
  }
  if (!reconciling) return;
  // Reconcile: undo the local moves and scale them by the frozen denominator; reconcile()
  // takes their average over the ranks instead.
  for (int64_t k = 0; k < n; ++k) {
    p[k] -= acc[k];
    acc[k] *= std::sqrt(v[k]) + eps;
  }
}

void ZeroOneAdam::reconcile(const Pending& t) {
  const ParamGroup& group = groups_[t.g];
  const int64_t n = group.params[t.i].numel();
  float* p = group.params[t.i].data<float>();
  float* m = slot(t.g, t.i, "exp_avg").data<float>();
  const float* v = slot(t.g, t.i, "exp_avg_sq").data<float>();
  float* acc = slot(t.g, t.i, "momentum_accumulator").data<float>();
  // The momentum is what the averaged moves amount to (v is frozen: the same denominator).
  const float lrs = static_cast<float>(lrs_[t.g] + group.lr);
  const float eps = static_cast<float>(options_.eps);
  for (int64_t k = 0; k < n; ++k) {
    m[k] = -(acc[k] / lrs);
    p[k] += acc[k] / (std::sqrt(v[k]) + eps);
    acc[k] = 0;
  }
}

void ZeroOneAdam::update_all(std::vector<Pending>& pending, bool frozen) {
  // Off the variance steps before the freeze each rank's own gradients are averaged by the
  // 1-bit all-reduce (all tensors in one exchange), then the moments; then the local updates,
  // and at a reconciliation the accumulated moves averaged (one exchange) and taken.
  const bool own_gradients = !frozen && step_ % counters_.var_interval != 0 && world() > 1;
  const bool reconciling = frozen && step_ % counters_.local_step_interval == 0;
  std::vector<CompressionErrors::Request> exchange;
  if (own_gradients) {
    const float scale = static_cast<float>(grad_scale_);
    for (Pending& t : pending) {
      const Tensor grad = t.grad.to(DType::Float32).contiguous();
      const float* gr = grad.data<float>();
      t.averaged.resize(static_cast<size_t>(t.grad.numel()));
      for (size_t k = 0; k < t.averaged.size(); ++k) t.averaged[k] = gr[k] * scale;
      exchange.push_back({groups_[t.g].names[t.i], t.averaged.data(), t.grad.numel()});
    }
    errors_.all_reduce(exchange, *transport_);
    exchange.clear();
    for (Pending& t : pending) apply_exp_avg_mask(t.g, t.i, t.averaged.data());
  }
  for (Pending& t : pending) {
    moments(t, frozen);
    t.averaged = {};
    local_update(t, frozen, reconciling);
    if (reconciling && world() > 1)
      exchange.push_back({groups_[t.g].names[t.i],
                          slot(t.g, t.i, "momentum_accumulator").data<float>(),
                          groups_[t.g].params[t.i].numel()});
  }
  if (!exchange.empty()) errors_.all_reduce(exchange, *transport_);
  for (Pending& t : pending) {
    if (reconciling && world() > 1)
      apply_exp_avg_mask(t.g, t.i, slot(t.g, t.i, "momentum_accumulator").data<float>());
    if (reconciling) reconcile(t);
    groups_[t.g].params[t.i].bump_version();
    write_model_copy(t.g, t.i);
  }
}

void ZeroOneAdam::advance_counters(bool frozen) {
  Counters& c = counters_;
  if (frozen) {
    const bool reconciled = step_ % c.local_step_interval == 0;
    for (size_t g = 0; g < groups_.size(); ++g) lrs_[g] = reconciled ? 0 : lrs_[g] + groups_[g].lr;
    if (++c.local_step_counter == options_.local_step_scaler) {
      c.local_step_counter = 0;
      c.local_step_interval = std::min(options_.local_step_clipper, c.local_step_interval * 2);
    }
    return;
  }
  if (step_ % c.var_interval == 0 && ++c.var_counter == options_.var_update_scaler) {
    c.var_counter = 0;
    c.var_interval *= 2;
  }
  allreduce_ = (step_ + 1) % c.var_interval == 0;
}

void ZeroOneAdam::step() {
  NoGradGuard no_grad;
  const bool setting_up = step_ == 0, frozen = frozen_after(step_);
  ++step_;
  std::vector<Pending> pending;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor grad = gradient_of(g, i);
      if (!grad.defined()) continue;
      for (const char* s : {"exp_avg", "exp_avg_sq", "momentum_accumulator"}) slot(g, i, s);
      if (setting_up) continue;  // DeepSpeed's initialisation step
      pending.push_back(pending_update(g, i, grad));
    }
  }
  if (setting_up) return;
  update_all(pending, frozen);
  advance_counters(frozen);
  if (frozen_after(step_)) {
    allreduce_ = false;
    if (!frozen) errors_.zero();  // once, at the freeze
  }
}

std::map<std::string, Tensor> ZeroOneAdam::state_dict() const {
  std::map<std::string, Tensor> out = Optimizer::state_dict();
  const Counters& c = counters_;
  const int64_t values[] = {c.var_interval, c.var_counter, c.local_step_interval,
                            c.local_step_counter, allreduce_ ? 1 : 0};
  for (size_t k = 0; k < std::size(kCounters); ++k)
    out[kZeroOnePrefix + kCounters[k]] = full({}, static_cast<double>(values[k]), DType::Int64);
  out[kZeroOnePrefix + "lrs"] =
      from_vector(lrs_, {static_cast<int64_t>(lrs_.size())}, DType::Float64);
  return out;
}

void ZeroOneAdam::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> slots = state;
  int64_t values[std::size(kCounters)] = {};
  for (size_t k = 0; k < std::size(kCounters); ++k) {
    const auto it = slots.find(kZeroOnePrefix + kCounters[k]);
    TS_CHECK(it != slots.end() && it->second.numel() == 1, "ZeroOneAdam.load_state_dict: no '",
             kZeroOnePrefix, kCounters[k], "' entry (not a ZeroOneAdam checkpoint?)");
    values[k] = static_cast<int64_t>(it->second.item());
    slots.erase(it);
  }
  const auto lrs = slots.find(kZeroOnePrefix + "lrs");
  TS_CHECK(lrs != slots.end() && lrs->second.numel() == static_cast<int64_t>(groups_.size()),
           "ZeroOneAdam.load_state_dict: '", kZeroOnePrefix, "lrs' must hold one value per group (",
           groups_.size(), ")");
  const std::vector<double> lrs_values = lrs->second.to_vector();
  slots.erase(lrs);
  Optimizer::load_state_dict(slots);
  TS_CHECK(values[0] >= 1 && values[2] >= 1, "ZeroOneAdam.load_state_dict: intervals ", values[0],
           " and ", values[2], " must be >= 1");
  counters_ = {values[0], values[1], values[2], values[3]};
  allreduce_ = values[4] != 0;
  lrs_ = lrs_values;
  errors_.clear();  // (load_rank_state brings this rank's)
}

std::map<std::string, Tensor> ZeroOneAdam::rank_state() const {
  if (world() == 1 || step_ == 0) return {};
  std::map<std::string, Tensor> out = error_state();
  out["world"] = full({}, world(), DType::Int64);
  // Between reconciliations each rank's parameters, momentum and accumulator are its own.
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const std::string& name = groups_[g].names[i];
      out[name + ".param"] = groups_[g].params[i].clone();
      for (const char* s : {"exp_avg", "momentum_accumulator"})
        if (auto it = state_.find(name + "." + s); it != state_.end())
          out[it->first] = it->second.clone();
    }
  return out;
}

void ZeroOneAdam::load_rank_state(const std::map<std::string, Tensor>& mine,
                                  const std::map<std::string, Tensor>& rank0) {
  check_saved_rank_count("ZeroOneAdam", rank0, world());
  TS_CHECK(rank0.empty() || !mine.empty(),
           "ZeroOneAdam: the checkpoint holds rank 0's own state but not this rank's");
  errors_.load(
      mine, [this](const std::string& name) { return numel_of(name); }, world());
  NoGradGuard no_grad;
  for (const auto& [key, t] : mine) {
    if (key == "world" || key.ends_with("_error")) continue;
    const size_t dot = key.rfind('.');
    const std::string name = key.substr(0, dot), kind = key.substr(dot + 1);
    bool found = false;
    for (size_t g = 0; g < groups_.size(); ++g)
      for (size_t i = 0; i < groups_[g].params.size(); ++i) {
        if (groups_[g].names[i] != name) continue;
        Tensor& target = kind == "param" ? groups_[g].params[i] : slot(g, i, kind);
        TS_CHECK((kind == "param" || kind == "exp_avg" || kind == "momentum_accumulator") &&
                     t.shape() == target.shape(),
                 "ZeroOneAdam: rank state '", key, "' is ", t.describe(), ", expected ",
                 target.describe());
        target.copy_(t.to(target.dtype()));
        found = true;
      }
    TS_CHECK(found, "ZeroOneAdam: rank state '", key, "' belongs to no parameter");
  }
}

}  // namespace tessera::optim
