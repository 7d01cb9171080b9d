#include "tessera/optim/onebit_adam.h"

#include <cmath>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::optim {

OneBitAdam::OneBitAdam(std::vector<ParamGroup> groups, OneBitAdamOptions options,
                       std::shared_ptr<OneBitTransport> transport)
    : Optimizer(std::move(groups)), options_(options), transport_(std::move(transport)) {
  set_betas(options.beta1, options.beta2);
  TS_CHECK(options.eps > 0, "OneBitAdam: eps must be > 0, got ", options.eps);
  TS_CHECK(options.freeze_step >= 0, "OneBitAdam: freeze_step must be >= 0, got ",
           options.freeze_step);
  for (const ParamGroup& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i)
      TS_CHECK(g.params[i].dtype() == DType::Float32 && g.params[i].device().is_cpu() &&
                   g.params[i].is_contiguous(),
               "OneBitAdam: '", g.names[i], "' is ", g.params[i].describe(),
               "; it updates contiguous float32 CPU tensors (float32 masters under mixed "
               "precision; its CUDA kernels are not written yet)");
}

bool OneBitAdam::set_betas(double beta1, double beta2) {
  TS_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
           "OneBitAdam: betas must be in [0, 1), got (", beta1, ", ", beta2, ")");
  options_.beta1 = beta1;
  options_.beta2 = beta2;
  return true;
}

void OneBitAdam::update(size_t g, size_t i, const Tensor& grad_tensor) {
  const ParamGroup& group = groups_[g];
  const int64_t n = group.params[i].numel();
  TS_CHECK(grad_tensor.shape() == group.params[i].shape(), "OneBitAdam: gradient of '",
           group.names[i], "' is ", grad_tensor.describe(), ", parameter is ",
           group.params[i].describe());
  const Tensor grad = grad_tensor.to(DType::Float32).contiguous();
  float* p = group.params[i].data<float>();
  float* m = slot(g, i, "exp_avg").data<float>();
  float* v = slot(g, i, "exp_avg_sq").data<float>();
  const float* gr = grad.data<float>();
  // (float32 arithmetic, as DeepSpeed's on float32 tensors)
  const float b1 = static_cast<float>(options_.beta1), b2 = static_cast<float>(options_.beta2);
  // 1 - beta in double, then float32: what torch's add_(1 - beta1, grad) multiplies by.
  const float c1 = static_cast<float>(1 - options_.beta1),
              c2 = static_cast<float>(1 - options_.beta2);
  const float scale = static_cast<float>(grad_scale_);
  if (!frozen_) {
    for (int64_t k = 0; k < n; ++k) {
      const float gk = gr[k] * scale;
      m[k] = b1 * m[k] + c1 * gk;
      v[k] = b2 * v[k] + c2 * gk * gk;
    }
  } else {
    for (int64_t k = 0; k < n; ++k) m[k] = b1 * m[k] + c1 * (gr[k] * scale);
    const int world = transport_ ? transport_->world() : 1;
    if (world > 1) {
      Errors& e = errors_[{g, i}];
      const int64_t padded = onebit_padded_size(n, world);
      if (e.worker.empty()) {
        e.worker.assign(static_cast<size_t>(padded), 0.0f);
        e.server.assign(static_cast<size_t>(padded / world), 0.0f);
      }
      std::vector<float> buffer(static_cast<size_t>(padded), 0.0f);
      std::copy(m, m + n, buffer.begin());
      compressed_all_reduce(buffer, e.worker, e.server, *transport_);
      std::copy(buffer.begin(), buffer.begin() + n, m);
    }
  }
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
  ++step_;
  for (size_t g = 0; g < groups_.size(); ++g) {
    Tensor* const* copies = model_copies_.empty() ? nullptr : model_copies_[g].data();
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor grad = copies ? copies[i]->grad() : groups_[g].params[i].grad();
      if (!grad.defined()) continue;
      slot(g, i, "exp_avg");
      slot(g, i, "exp_avg_sq");
      if (!initialized_) continue;  // DeepSpeed's initialisation step
      update(g, i, grad);
      if (copies) {
        copies[i]->detach().copy_(groups_[g].params[i].to(copies[i]->dtype()));
        copies[i]->bump_version();
      }
    }
  }
  initialized_ = true;
  if (!frozen_ && step_ >= options_.freeze_step && step_ > 1) frozen_ = true;
}

void OneBitAdam::load_state_dict(const std::map<std::string, Tensor>& state) {
  Optimizer::load_state_dict(state);
  // Past its first step, frozen once the count has reached freeze_step (as DeepSpeed's
  // load_state_dict decides); the errors come with load_rank_state, else start at zero.
  initialized_ = step_ > 0;
  frozen_ = step_ > 1 && step_ >= options_.freeze_step;
  errors_.clear();
}

namespace {

Tensor float_tensor(const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::Float32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

}  // namespace

std::map<std::string, Tensor> OneBitAdam::rank_state() const {
  if (errors_.empty()) return {};
  const int world = transport_ ? transport_->world() : 1;
  std::map<std::string, Tensor> out{{"world", full({}, world, DType::Int64)}};
  for (const auto& [at, e] : errors_) {
    const std::string& name = groups_[at.first].names[at.second];
    out[name + ".worker_error"] = float_tensor(e.worker);
    out[name + ".server_error"] = float_tensor(e.server);
  }
  return out;
}

void OneBitAdam::load_rank_state(const std::map<std::string, Tensor>& mine,
                                 const std::map<std::string, Tensor>& rank0) {
  const int world = transport_ ? transport_->world() : 1;
  if (auto it = rank0.find("world"); it != rank0.end()) {
    const auto saved = static_cast<int64_t>(it->second.item());
    TS_CHECK(saved == world, "OneBitAdam: the checkpoint was taken after the freeze by ", saved,
             " data-parallel ranks and this run has ", world,
             ": the compression errors are each rank's (and the server errors a chunk of ", saved,
             "), so they cannot be carried over; resume with ", saved,
             " ranks, or load without the optimizer state (load_optimizer_states = false)");
  }
  for (const auto& [key, t] : mine) {
    if (key == "world") continue;
    const size_t dot = key.rfind('.');
    const std::string name = key.substr(0, dot), kind = key.substr(dot + 1);
    bool found = false;
    for (size_t g = 0; g < groups_.size() && !found; ++g)
      for (size_t i = 0; i < groups_[g].params.size() && !found; ++i) {
        if (groups_[g].names[i] != name) continue;
        found = true;
        const int64_t padded = onebit_padded_size(groups_[g].params[i].numel(), world);
        const int64_t want = kind == "worker_error" ? padded : padded / world;
        TS_CHECK((kind == "worker_error" || kind == "server_error") && t.numel() == want &&
                     t.dtype() == DType::Float32,
                 "OneBitAdam: rank state '", key, "' is ", t.describe(), ", expected ", want,
                 " float32 values");
        const Tensor c = t.contiguous();
        std::vector<float>& v =
            kind == "worker_error" ? errors_[{g, i}].worker : errors_[{g, i}].server;
        v.assign(c.data<float>(), c.data<float>() + want);
      }
    TS_CHECK(found, "OneBitAdam: rank state '", key, "' belongs to no parameter");
  }
  for (const auto& [at, e] : errors_)
    TS_CHECK(!e.worker.empty() && !e.server.empty(), "OneBitAdam: the rank state of '",
             groups_[at.first].names[at.second], "' lacks its ",
             e.worker.empty() ? "worker" : "server", " error");
}

}  // namespace tessera::optim
