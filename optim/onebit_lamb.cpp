#include "tessera/optim/onebit_lamb.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::optim {

namespace {

const std::string kLambPrefix = "onebit_lamb.";
const std::string kMomenta = "(momenta)";  // the flat buffer's errors

// ||x|| of n float32 values as a float32 (summed in double).
float norm32(const float* x, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; ++k) s += static_cast<double>(x[k]) * x[k];
  return static_cast<float>(std::sqrt(s));
}

Tensor doubles(const std::vector<double>& v) {
  return from_vector(v, {static_cast<int64_t>(v.size())}, DType::Float64);
}

}  // namespace

OneBitLamb::OneBitLamb(std::vector<ParamGroup> groups, OneBitLambOptions options,
                       std::shared_ptr<OneBitTransport> transport)
    : OneBitOptimizer(std::move(groups), "OneBitLamb", options.beta1, options.beta2, options.eps,
                      std::move(transport)),
      options_(options) {
  TS_CHECK(options.freeze_step >= 0, "OneBitLamb: freeze_step must be >= 0");
  TS_CHECK(options.min_coeff <= options.max_coeff && options.factor_min <= options.factor_max &&
               options.factor_threshold >= 0 && options.coeff_beta >= 0 && options.coeff_beta < 1,
           "OneBitLamb: needs min_coeff <= max_coeff, factor_min <= factor_max, "
           "factor_threshold >= 0 and coeff_beta in [0, 1)");
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) params_.push_back({g, i});
}

void OneBitLamb::warmup_update(Param& q, const Tensor& grad_tensor) {
  const ParamGroup& group = groups_[q.group];
  Tensor& param = groups_[q.group].params[q.index];
  const int64_t n = param.numel();
  const Tensor grad = grad_tensor.to(DType::Float32).contiguous();
  float* p = param.data<float>();
  float* m = slot(q.group, q.index, "exp_avg").data<float>();
  float* v = slot(q.group, q.index, "exp_avg_sq").data<float>();
  float* vf = slot(q.group, q.index, "exp_avg_sq_fresh").data<float>();
  const float b1 = static_cast<float>(beta1_), b2 = static_cast<float>(beta2_);
  const float c1 = static_cast<float>(1 - beta1_), c2 = static_cast<float>(1 - beta2_);
  const float scale = static_cast<float>(grad_scale_), eps = static_cast<float>(options_.eps);
  const float wd = static_cast<float>(group.weight_decay);
  std::vector<float> update(static_cast<size_t>(n));
  const float* gr = grad.data<float>();
  for (int64_t k = 0; k < n; ++k) {
    const float g = gr[k] * scale;
    m[k] = b1 * m[k] + c1 * g;
    v[k] = b2 * v[k] + c2 * g * g;
  }
  if (step_ == options_.freeze_step) std::copy(v, v + n, vf);
  const float weight_norm = norm32(p, n);
  for (int64_t k = 0; k < n; ++k) {
    update[k] = m[k] / (std::sqrt(v[k]) + eps);
    if (wd > 0) update[k] += wd * p[k];
  }
  const float update_norm = norm32(update.data(), n);
  double coeff = 1.0;
  if (weight_norm != 0 && update_norm != 0)
    coeff = std::clamp(static_cast<double>(weight_norm / update_norm), options_.min_coeff,
                       options_.max_coeff);
  if (coeff != 1.0)
    q.coeff_freeze = options_.coeff_beta * q.coeff_freeze + (1 - options_.coeff_beta) * coeff;
  lamb_coeffs_.push_back(coeff);
  const float step = static_cast<float>(-group.lr * coeff);
  for (int64_t k = 0; k < n; ++k) p[k] += step * update[k];
  param.bump_version();
}

void OneBitLamb::frozen_step(const std::vector<Tensor>& grads) {
  const float b1 = static_cast<float>(beta1_), b2 = static_cast<float>(beta2_);
  const float c1 = static_cast<float>(1 - beta1_), c2 = static_cast<float>(1 - beta2_);
  const float scale = static_cast<float>(grad_scale_), eps = static_cast<float>(options_.eps);
  const auto momentum = [&](const Param& q) { return slot(q.group, q.index, "exp_avg"); };
  std::vector<std::vector<float>> last;
  for (const Param& q : params_) {
    const Tensor m = momentum(q);
    last.emplace_back(m.data<float>(), m.data<float>() + m.numel());
  }
  if (!scaled_) {  // every momentum scaled to their mean root-mean-square, once
    std::vector<double> scales;
    for (const auto& m : last)
      scales.push_back(
          static_cast<double>(norm32(m.data(), static_cast<int64_t>(m.size())) /
                              static_cast<float>(std::sqrt(static_cast<double>(m.size())))));
    const double united =
        std::accumulate(scales.begin(), scales.end(), 0.0) / static_cast<double>(scales.size());
    for (size_t j = 0; j < params_.size(); ++j) params_[j].scaling = united / scales[j];
    scaled_ = true;
  }
  // The momenta with this rank's gradients, scaled, in one buffer with the kept padding.
  std::vector<float> flat;
  size_t elements = padding_.size();
  for (const auto& m : last) elements += m.size();
  flat.reserve(elements);
  for (size_t j = 0; j < params_.size(); ++j) {
    const Tensor grad = grads[j].to(DType::Float32).contiguous();
    const float* gr = grad.data<float>();
    const float s = static_cast<float>(params_[j].scaling);
    for (size_t k = 0; k < last[j].size(); ++k) {
      const float m = b1 * last[j][k] + c1 * (gr[k] * scale);
      flat.push_back(m * s);
    }
  }
  const size_t total = flat.size();
  flat.insert(flat.end(), padding_.begin(), padding_.end());
  if (world() > 1)
    errors_.all_reduce(kMomenta, flat.data(), static_cast<int64_t>(flat.size()), *transport_);
  padding_.assign(flat.begin() + static_cast<std::ptrdiff_t>(total), flat.end());
  size_t at = 0;
  for (size_t j = 0; j < params_.size(); ++j) {
    Param& q = params_[j];
    const ParamGroup& group = groups_[q.group];
    Tensor& param = groups_[q.group].params[q.index];
    const int64_t n = param.numel();
    float* p = param.data<float>();
    float* m = momentum(q).data<float>();
    const float* v = slot(q.group, q.index, "exp_avg_sq").data<float>();
    float* vf = slot(q.group, q.index, "exp_avg_sq_fresh").data<float>();
    const float s = static_cast<float>(q.scaling), wd = static_cast<float>(group.weight_decay);
    std::vector<float> prelim(static_cast<size_t>(n)), update(static_cast<size_t>(n));
    float factor32 = -INFINITY;
    for (int64_t k = 0; k < n; ++k) m[k] = flat[at + static_cast<size_t>(k)] / s;
    apply_exp_avg_mask(q.group, q.index, m);
    for (int64_t k = 0; k < n; ++k) {
      const float g = (m[k] - last[j][static_cast<size_t>(k)] * b1) / c1;  // the gradient rebuilt
      vf[k] = b2 * vf[k] + c2 * g * g;
      const float denom = std::sqrt(v[k]) + eps;
      prelim[k] = m[k] / denom;
      update[k] = wd > 0 ? prelim[k] + wd * p[k] : prelim[k];
      factor32 = std::max(factor32, denom / (std::sqrt(vf[k]) + eps));
    }
    at += static_cast<size_t>(n);
    double factor = factor32;
    const float update_norm = norm32(update.data(), n);
    if (wd > 0) {
      const double ratio =
          std::min(1.0, static_cast<double>(norm32(prelim.data(), n) / update_norm));
      factor = factor * ratio + (1.0 - ratio);
    }
    factor = std::clamp(factor, options_.factor_min, options_.factor_max);
    factor = std::min(factor, q.last_factor * (1.0 + options_.factor_threshold));
    factor = std::max(factor, q.last_factor * (1.0 - options_.factor_threshold));
    q.last_factor = factor;
    const double coeff = q.coeff_freeze * factor;
    lamb_coeffs_.push_back(coeff);
    const float step = static_cast<float>(-group.lr * coeff);
    for (int64_t k = 0; k < n; ++k) p[k] += step * update[k];
    param.bump_version();
  }
}

void OneBitLamb::step() {
  NoGradGuard no_grad;
  const bool setting_up = step_ == 0, frozen = frozen_after(step_);
  ++step_;
  lamb_coeffs_.clear();
  std::vector<Tensor> grads;
  for (const Param& q : params_) {
    const Tensor grad = gradient_of(q.group, q.index);
    TS_CHECK(grad.defined() && grad.shape() == groups_[q.group].params[q.index].shape(),
             "OneBitLamb: '", groups_[q.group].names[q.index], "' has ",
             grad.defined() ? "a gradient " + grad.describe() : std::string("no gradient"),
             ": 1-bit LAMB exchanges every parameter's momentum in one buffer at every step");
    grads.push_back(grad);
    for (const char* s : {"exp_avg", "exp_avg_sq", "exp_avg_sq_fresh"}) slot(q.group, q.index, s);
  }
  if (setting_up) {  // DeepSpeed's initialisation step
    const int64_t total = momenta_numel();
    padding_.assign(static_cast<size_t>(onebit_padded_size(total, world()) - total), 0.0f);
    return;
  }
  if (frozen) {
    frozen_step(grads);
  } else {
    for (size_t j = 0; j < params_.size(); ++j) warmup_update(params_[j], grads[j]);
  }
  for (const Param& q : params_) write_model_copy(q.group, q.index);
}

int64_t OneBitLamb::momenta_numel() const {
  return std::accumulate(
      params_.begin(), params_.end(), int64_t{0},
      [&](int64_t s, const Param& q) { return s + groups_[q.group].params[q.index].numel(); });
}

std::map<std::string, Tensor> OneBitLamb::state_dict() const {
  std::map<std::string, Tensor> out = Optimizer::state_dict();
  std::vector<double> coeff, last, scaling;
  for (const Param& q : params_) {
    coeff.push_back(q.coeff_freeze);
    last.push_back(q.last_factor);
    scaling.push_back(q.scaling);
  }
  out[kLambPrefix + "lamb_coeff_freeze"] = doubles(coeff);
  out[kLambPrefix + "last_factor"] = doubles(last);
  out[kLambPrefix + "scaling_coeff"] = doubles(scaling);
  out[kLambPrefix + "scaled"] = full({}, scaled_ ? 1 : 0, DType::Int64);
  std::vector<double> pad(padding_.begin(), padding_.end());
  out[kLambPrefix + "padding"] = doubles(pad);
  return out;
}

void OneBitLamb::load_state_dict(const std::map<std::string, Tensor>& state) {
  std::map<std::string, Tensor> slots = state;
  const auto take = [&](const std::string& key, int64_t n) {
    const auto it = slots.find(kLambPrefix + key);
    TS_CHECK(it != slots.end() && (n < 0 || it->second.numel() == n),
             "OneBitLamb.load_state_dict: '", kLambPrefix, key, "' is missing or not ", n,
             " values (not a OneBitLamb checkpoint of this model?)");
    std::vector<double> v = it->second.to_vector();
    slots.erase(it);
    return v;
  };
  const auto count = static_cast<int64_t>(params_.size());
  const std::vector<double> coeff = take("lamb_coeff_freeze", count),
                            last = take("last_factor", count),
                            scaling = take("scaling_coeff", count), scaled = take("scaled", 1),
                            pad = take("padding", -1);
  Optimizer::load_state_dict(slots);
  for (size_t j = 0; j < params_.size(); ++j) {
    params_[j].coeff_freeze = coeff[j];
    params_[j].last_factor = last[j];
    params_[j].scaling = scaling[j];
  }
  scaled_ = scaled[0] != 0;
  padding_.assign(pad.begin(), pad.end());
  errors_.clear();
}

std::map<std::string, Tensor> OneBitLamb::rank_state() const {
  return error_state();
}

void OneBitLamb::load_rank_state(const std::map<std::string, Tensor>& mine,
                                 const std::map<std::string, Tensor>& rank0) {
  check_saved_rank_count("OneBitLamb", rank0, world());
  const int64_t flat = momenta_numel() + static_cast<int64_t>(padding_.size());
  errors_.load(
      mine, [&](const std::string& name) { return name == kMomenta ? flat : int64_t{-1}; },
      world());
}

}  // namespace tessera::optim
