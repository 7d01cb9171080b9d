// What DeepSpeed's compressed optimizers (OneBitAdam, ZeroOneAdam, OneBitLamb) share: the
// transport over the data-parallel ranks that the engine hands them, their compression errors,
// their betas, and the tensors they update (contiguous float32 CPU tensors: the masters under
// mixed precision; their CUDA kernels are not written yet).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/optim/compression_errors.h"
#include "tessera/optim/optimizer.h"

namespace tessera::optim {

class OneBitOptimizer : public Optimizer {
 public:
  bool takes_data_parallel_transport() const override { return true; }
  void set_data_parallel_transport(std::shared_ptr<OneBitTransport> transport) override {
    transport_ = std::move(transport);
  }
  bool set_betas(double beta1, double beta2) override;
  std::optional<std::pair<double, double>> betas() const override {
    return std::make_pair(beta1_, beta2_);
  }

 protected:
  // `who` names the optimizer in errors.
  OneBitOptimizer(std::vector<ParamGroup> groups, const char* who, double beta1, double beta2,
                  double eps, std::shared_ptr<OneBitTransport> transport);
  int world() const { return transport_ ? transport_->world() : 1; }
  // The gradient step() reads for group g's i-th parameter: its model copy's under mixed
  // precision, else its own (undefined: none).
  Tensor gradient_of(size_t g, size_t i) const;
  // After an update: the model copy (if any) receives the parameter, cast.
  void write_model_copy(size_t g, size_t i);
  // "world" and the errors (what rank_state() saves of them); empty when there are none.
  std::map<std::string, Tensor> error_state() const;
  // DeepSpeed's exp_avg_mask: data[k] *= group g's mask broadcast to parameter i's shape (no
  // mask: nothing).
  void apply_exp_avg_mask(size_t g, size_t i, float* data) const;
  const char* who_;
  double beta1_, beta2_;
  std::shared_ptr<OneBitTransport> transport_;
  CompressionErrors errors_;

 private:
  std::map<std::pair<size_t, size_t>, std::vector<float>> masks_;  // expanded, by (group, index)
};

}  // namespace tessera::optim
