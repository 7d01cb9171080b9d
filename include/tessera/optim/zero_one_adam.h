// DeepSpeed's 0/1 Adam (ZeroOneAdam, runtime/fp16/onebit/zoadam.py; Lu et al. 2022): Adam
// whose variance is updated on fewer and fewer steps (every var_interval steps, the interval
// doubling after var_update_scaler updates; only those steps all-reduce the gradients, the
// others average them with the 1-bit compressed all-reduce into the momentum), frozen after
// var_freeze_step; then local steps: each rank updates its own parameters with its own
// gradients, and every local_step_interval steps (doubling every local_step_scaler steps up to
// local_step_clipper) the ranks reconcile what they moved through one 1-bit all-reduce.
//
// As DeepSpeed's, step by step: the first step only sets the state up; no bias correction;
// weight decay added to the update; the variance updated from the engine's averaged gradient;
// the compression errors zeroed once at the freeze. Between reconciliations the ranks'
// parameters and momenta differ (that is the algorithm): rank_state() holds each rank's own,
// with its errors and its accumulator, so a checkpoint resumes bit for bit at its rank count.
#pragma once
#include <memory>

#include "tessera/optim/onebit_optimizer.h"

namespace tessera::optim {

struct ZeroOneAdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t var_freeze_step = 100000;  // DeepSpeed's defaults
  int64_t var_update_scaler = 16;
  int64_t local_step_scaler = 32678;
  int64_t local_step_clipper = 16;
};

class ZeroOneAdam : public OneBitOptimizer {
 public:
  ZeroOneAdam(std::vector<ParamGroup> groups, ZeroOneAdamOptions options = {},
              std::shared_ptr<OneBitTransport> transport = nullptr);
  void step() override;
  std::string name() const override { return "ZeroOneAdam"; }
  std::unique_ptr<Optimizer> rebuild(std::vector<ParamGroup> groups) const override {
    ZeroOneAdamOptions o = options_;
    o.beta1 = beta1_;
    o.beta2 = beta2_;
    return std::make_unique<ZeroOneAdam>(std::move(groups), o, transport_);
  }
  bool frozen() const { return frozen_after(step_); }
  // Only the variance steps read the engine's averaged gradients.
  bool reads_local_gradients() const override { return !allreduce_; }
  std::map<std::string, Tensor> state_dict() const override;
  void load_state_dict(const std::map<std::string, Tensor>& state) override;
  std::map<std::string, Tensor> rank_state() const override;
  void load_rank_state(const std::map<std::string, Tensor>& mine,
                       const std::map<std::string, Tensor>& rank0) override;

 private:
  // The schedule's counters (DeepSpeed keeps them per parameter; every parameter steps alike).
  struct Counters {
    int64_t var_interval = 1, var_counter = 0, local_step_interval = 1, local_step_counter = 0;
  };
  // Frozen for the step after `steps` steps (the first, DeepSpeed's set-up, never freezes).
  bool frozen_after(int64_t steps) const { return steps > 1 && steps > options_.var_freeze_step; }
  // One tensor's step in phases, so that each exchange carries every tensor at once.
  struct Pending {
    size_t g, i;
    Tensor grad;                  // as read (a bf16 model copy's: converted when used)
    std::vector<float> averaged;  // its scaled copy, averaged over the ranks (when exchanged)
  };
  Pending pending_update(size_t g, size_t i, const Tensor& grad);
  void moments(Pending& t, bool frozen);
  // (reconciling: the accumulated moves are averaged this step)
  void local_update(const Pending& t, bool frozen, bool reconciling);
  void reconcile(const Pending& t);
  void update_all(std::vector<Pending>& pending, bool frozen);
  void advance_counters(bool frozen);
  ZeroOneAdamOptions options_;
  bool allreduce_ = true;
  Counters counters_;
  std::vector<double> lrs_;  // each group's learning rates since the last reconciliation
};

}  // namespace tessera::optim
