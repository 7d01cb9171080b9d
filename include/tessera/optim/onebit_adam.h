// DeepSpeed's 1-bit Adam (OnebitAdam, runtime/fp16/onebit/adam.py; Tang et al. 2021): Adam
// during a warm-up of freeze_step steps on the ranks' averaged gradients, then the variance
// frozen and only the momentum communicated, through the error-compensated 1-bit
// compressed_all_reduce (about 1/32 of the bytes of a float32 all-reduce).
//
// As DeepSpeed's, step by step:
//   - the first step() sets the state up and changes no parameter (DeepSpeed's initialisation
//     step; its gradients are not used), though it counts as step 1;
//   - no bias correction (DeepSpeed's OnebitAdam takes bias_correction and ignores it), eps
//     outside the root, weight decay added to the update (update = m / (sqrt(v) + eps) +
//     weight_decay * p; p -= lr * update);
//   - after a step that brings the count to freeze_step the optimizer freezes: from then on
//     the gradients it reads must be this rank's own (not averaged: reduces_gradients() tells
//     the engine so), m = beta1 m + (1 - beta1) g locally, then m <- compressed_all_reduce(m)
//     per parameter tensor, v unchanged.
// The compression errors are per rank and per tensor: rank_state() holds them (the engine saves
// each rank's in its own checkpoint file, so a resume continues bit for bit, where DeepSpeed
// starts them again at zero), and a checkpoint taken after the freeze resumes only at its
// rank count (the worker errors are per rank, the server errors per chunk of that count).
#pragma once
#include <memory>

#include "tessera/optim/onebit_optimizer.h"

namespace tessera::optim {

struct OneBitAdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t freeze_step = 100000;  // DeepSpeed's default
};

class OneBitAdam : public OneBitOptimizer {
 public:
  // transport: the data-parallel ranks (null: one process, where nothing is communicated).
  OneBitAdam(std::vector<ParamGroup> groups, OneBitAdamOptions options = {},
             std::shared_ptr<OneBitTransport> transport = nullptr);
  void step() override;
  std::string name() const override { return "OneBitAdam"; }
  std::unique_ptr<Optimizer> rebuild(std::vector<ParamGroup> groups) const override {
    OneBitAdamOptions o = options_;
    o.beta1 = beta1_;
    o.beta2 = beta2_;
    return std::make_unique<OneBitAdam>(std::move(groups), o, transport_);
  }
  bool frozen() const { return frozen_after(step_); }
  // After the freeze the gradients must be this rank's own: the engine then skips its
  // data-parallel all-reduce.
  bool reads_local_gradients() const override { return frozen(); }
  void load_state_dict(const std::map<std::string, Tensor>& state) override;
  std::map<std::string, Tensor> rank_state() const override;
  void load_rank_state(const std::map<std::string, Tensor>& mine,
                       const std::map<std::string, Tensor>& rank0) override;

 private:
  // Frozen for the step after `steps` steps (the first, DeepSpeed's set-up, never freezes).
  bool frozen_after(int64_t steps) const { return steps > 1 && steps >= options_.freeze_step; }
  // The moments of group g's i-th parameter (after the freeze only the momentum); returns it.
  float* momentum(size_t g, size_t i, const Tensor& grad, bool frozen);
  void apply(size_t g, size_t i);  // p -= lr * (m / (sqrt(v) + eps) + weight_decay * p)
  OneBitAdamOptions options_;
};

}  // namespace tessera::optim
