// DeepSpeed's 1-bit LAMB (OnebitLamb, runtime/fp16/onebit/lamb.py; Li et al. 2021): LAMB on
// the averaged gradients for freeze_step steps (tracking an average of each tensor's trust
// ratio), then the variance frozen and the momenta of all parameters, each scaled to a common
// size, averaged in one error-compensated 1-bit all-reduce; each tensor's step is its frozen
// trust ratio times a factor from a fresh variance rebuilt from the averaged momentum, kept in
// [factor_min, factor_max] and within factor_threshold of the last step's.
//
// As DeepSpeed's, step by step: the first step only sets the state up; no bias correction;
// weight decay added to the update; the momenta flattened into one buffer whose padding is
// kept between steps. Every parameter must have a gradient at every step (they travel as one
// buffer). The compression errors are each rank's: rank_state() holds them.
#pragma once
#include <memory>

#include "tessera/optim/onebit_optimizer.h"

namespace tessera::optim {

struct OneBitLambOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t freeze_step = 100000;  // DeepSpeed's defaults
  double max_coeff = 10.0, min_coeff = 0.01;
  double coeff_beta = 0.9, factor_max = 4.0, factor_min = 0.5, factor_threshold = 0.1;
};

class OneBitLamb : public OneBitOptimizer {
 public:
  OneBitLamb(std::vector<ParamGroup> groups, OneBitLambOptions options = {},
             std::shared_ptr<OneBitTransport> transport = nullptr);
  void step() override;
  std::string name() const override { return "OneBitLamb"; }
  std::unique_ptr<Optimizer> rebuild(std::vector<ParamGroup> groups) const override {
    OneBitLambOptions o = options_;
    o.beta1 = beta1_;
    o.beta2 = beta2_;
    return std::make_unique<OneBitLamb>(std::move(groups), o, transport_);
  }
  bool frozen() const { return frozen_after(step_); }
  // Each parameter's trust ratio in the last step, in group order.
  const std::vector<double>& lamb_coeffs() const { return lamb_coeffs_; }
  bool reads_local_gradients() const override { return frozen(); }
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state) override;
  std::map<std::string, Tensor> rank_state() const override;
  void load_rank_state(const std::map<std::string, Tensor>& mine,
                       const std::map<std::string, Tensor>& rank0) override;

 private:
  struct Param {
    size_t group, index;
    double coeff_freeze = 0, last_factor = 1, scaling = 0;
  };
  // Frozen for the step after `steps` steps (the first, DeepSpeed's set-up, never freezes).
  bool frozen_after(int64_t steps) const { return steps > 1 && steps >= options_.freeze_step; }
  int64_t momenta_numel() const;  // every parameter's elements
  void warmup_update(Param& q, const Tensor& grad);
  void frozen_step(const std::vector<Tensor>& grads);
  OneBitLambOptions options_;
  bool scaled_ = false;
  std::vector<Param> params_;   // every parameter, in group order
  std::vector<float> padding_;  // the flat buffer's tail past the momenta (kept, as DeepSpeed's)
  std::vector<double> lamb_coeffs_;
};

}  // namespace tessera::optim
