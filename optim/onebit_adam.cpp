#include "tessera/optim/onebit_adam.h"

#include <cmath>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::optim {

OneBitAdam::OneBitAdam(std::vector<ParamGroup> groups, OneBitAdamOptions options,
                       std::shared_ptr<OneBitTransport> transport)
    : OneBitOptimizer(std::move(groups), "OneBitAdam", options.beta1, options.beta2, options.eps,
                      std::move(transport)),
      options_(options) {
  TS_CHECK(options.freeze_step >= 0, "OneBitAdam: freeze_step must be >= 0, got ",
           options.freeze_step);
}

float* OneBitAdam::momentum(size_t g, size_t i, const Tensor& grad_tensor, bool frozen) {
  const ParamGroup& group = groups_[g];
  const int64_t n = group.params[i].numel();
  TS_CHECK(grad_tensor.shape() == group.params[i].shape(), "OneBitAdam: gradient of '",
           group.names[i], "' is ", grad_tensor.describe(), ", parameter is ",
           group.params[i].describe());
  const Tensor grad = grad_tensor.to(DType::Float32).contiguous();
  float* m = slot(g, i, "exp_avg").data<float>();
  float* v = slot(g, i, "exp_avg_sq").data<float>();
  const float* gr = grad.data<float>();
  // (float32 arithmetic, as DeepSpeed's on float32 tensors)
  const float b1 = static_cast<float>(beta1_), b2 = static_cast<float>(beta2_);
  // 1 - beta in double, then float32: what torch's add_(1 - beta1, grad) multiplies by.
  const float c1 = static_cast<float>(1 - beta1_), c2 = static_cast<float>(1 - beta2_);
  const float scale = static_cast<float>(grad_scale_);
  if (!frozen) {
    for (int64_t k = 0; k < n; ++k) {
      const float gk = gr[k] * scale;
      m[k] = b1 * m[k] + c1 * gk;
      v[k] = b2 * v[k] + c2 * gk * gk;
    }
  } else {
    for (int64_t k = 0; k < n; ++k) m[k] = b1 * m[k] + c1 * (gr[k] * scale);
  }
  return m;
}

void OneBitAdam::apply(size_t g, size_t i) {
  const ParamGroup& group = groups_[g];
  const int64_t n = group.params[i].numel();
  float* p = group.params[i].data<float>();
  const float* m = slot(g, i, "exp_avg").data<float>();
  const float* v = slot(g, i, "exp_avg_sq").data<float>();
  const float lr = static_cast<float>(group.lr), wd = static_cast<float>(group.weight_decay);
  const float eps = static_cast<float>(options_.eps);
  for (int64_t k = 0; k < n; ++k) {
    float u = m[k] / (std::sqrt(v[k]) + eps);
    if (wd > 0) u += wd * p[k];
    p[k] += -lr * u;
  }
  group.params[i].bump_version();
}

void OneBitAdam::step() {
  NoGradGuard no_grad;
  const bool setting_up = step_ == 0, frozen = frozen_after(step_);
  ++step_;
  std::vector<std::pair<size_t, size_t>> updated;
  std::vector<CompressionErrors::Request> momenta;  // (after the freeze: one exchange of all)
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor grad = gradient_of(g, i);
      if (!grad.defined()) continue;
      slot(g, i, "exp_avg");
      slot(g, i, "exp_avg_sq");
      if (setting_up) continue;  // DeepSpeed's initialisation step
      float* m = momentum(g, i, grad, frozen);
      updated.emplace_back(g, i);
      if (frozen) momenta.push_back({groups_[g].names[i], m, groups_[g].params[i].numel()});
    }
  }
  if (transport_) errors_.all_reduce(momenta, *transport_);
  for (const auto& [g, i] : updated) {
    if (frozen) apply_exp_avg_mask(g, i, slot(g, i, "exp_avg").data<float>());
    apply(g, i);
    write_model_copy(g, i);
  }
}

void OneBitAdam::load_state_dict(const std::map<std::string, Tensor>& state) {
  Optimizer::load_state_dict(state);
  // (Frozen or not follows from the step count, as DeepSpeed's load_state_dict decides.)
  // The errors come with load_rank_state, else start at zero.
  errors_.clear();
}

std::map<std::string, Tensor> OneBitAdam::rank_state() const {
  return error_state();
}

void OneBitAdam::load_rank_state(const std::map<std::string, Tensor>& mine,
                                 const std::map<std::string, Tensor>& rank0) {
  check_saved_rank_count("OneBitAdam", rank0, world());
  errors_.load(
      mine, [this](const std::string& name) { return numel_of(name); }, world());
  for (const auto& [key, t] : mine)
    TS_CHECK(key == "world" || key.ends_with(".worker_error") || key.ends_with(".server_error"),
             "OneBitAdam: rank state '", key, "' is not one it saves");
}

}  // namespace tessera::optim
