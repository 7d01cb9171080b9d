#include "tessera/optim/onebit_optimizer.h"

#include "tessera/ops.h"

namespace tessera::optim {

OneBitOptimizer::OneBitOptimizer(std::vector<ParamGroup> groups, const char* who, double beta1,
                                 double beta2, double eps,
                                 std::shared_ptr<OneBitTransport> transport)
    : Optimizer(std::move(groups)), who_(who), transport_(std::move(transport)) {
  set_betas(beta1, beta2);
  TS_CHECK(eps > 0, who_, ": eps must be > 0, got ", eps);
  for (const ParamGroup& g : groups_)
    for (size_t i = 0; i < g.params.size(); ++i)
      TS_CHECK(g.params[i].dtype() == DType::Float32 && g.params[i].device().is_cpu() &&
                   g.params[i].is_contiguous(),
               who_, ": '", g.names[i], "' is ", g.params[i].describe(),
               "; it updates contiguous float32 CPU tensors (float32 masters under mixed "
               "precision; its CUDA kernels are not written yet)");
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Tensor& mask = groups_[g].exp_avg_mask;
    if (!mask.defined()) continue;
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      const Tensor& p = groups_[g].params[i];
      Tensor expanded;
      try {
        expanded = mask.to(Device::cpu()).to(DType::Float32).expand(p.shape()).contiguous();
      } catch (const Error& e) {
        fail(who_, ": the exp_avg_mask of the group of '", groups_[g].names[i], "' is ",
             mask.describe(), ", which does not broadcast to the parameter's ", p.describe(), " (",
             e.what(), ")");
      }
      const float* m = expanded.data<float>();
      masks_[{g, i}] = std::vector<float>(m, m + expanded.numel());
    }
  }
}

void OneBitOptimizer::apply_exp_avg_mask(size_t g, size_t i, float* data) const {
  const auto it = masks_.find({g, i});
  if (it == masks_.end()) return;
  const std::vector<float>& mask = it->second;
  for (size_t k = 0; k < mask.size(); ++k) data[k] *= mask[k];  // (exp_avg.mul_(mask))
}

bool OneBitOptimizer::set_betas(double beta1, double beta2) {
  TS_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, who_,
           ": betas must be in [0, 1), got (", beta1, ", ", beta2, ")");
  beta1_ = beta1;
  beta2_ = beta2;
  return true;
}

Tensor OneBitOptimizer::gradient_of(size_t g, size_t i) const {
  return model_copies_.empty() ? groups_[g].params[i].grad() : model_copies_[g][i]->grad();
}

void OneBitOptimizer::write_model_copy(size_t g, size_t i) {
  if (model_copies_.empty()) return;
  Tensor* copy = model_copies_[g][i];
  copy->detach().copy_(groups_[g].params[i].to(copy->dtype()));
  copy->bump_version();
}

std::map<std::string, Tensor> OneBitOptimizer::error_state() const {
  if (errors_.empty()) return {};
  std::map<std::string, Tensor> out{{"world", full({}, world(), DType::Int64)}};
  errors_.save(out);
  return out;
}

}  // namespace tessera::optim
