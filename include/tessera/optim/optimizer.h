// Optimizers over parameter groups. step() updates every parameter of a group in one fused
// kernel call (per dtype), reading each parameter's .grad; parameters without a gradient are
// skipped. State (moments, step counts) saves to and loads from named tensors.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/dispatch.h"
#include "tessera/tensor.h"

namespace tessera::optim {

struct ParamGroup {
  std::vector<std::string> names;  // for state keys and messages
  std::vector<Tensor> params;
  double lr = 1e-3;
  double weight_decay = 0.0;
  // DeepSpeed's param-group key of its compressed optimizers (OneBitAdam, ZeroOneAdam,
  // OneBitLamb read it; the others do not): a mask, broadcast to each parameter's shape,
  // multiplied into the 1-bit-averaged momentum, so entries whose momentum should stay exactly
  // zero (the position-embedding rows a shorter sequence never reaches) do not collect
  // compression noise. Not checkpointed: the program sets it, as DeepSpeed's script does.
  Tensor exp_avg_mask;
};

// A parameter group as a user names it (DeepSpeed's model_parameters list of dicts): the
// model's parameter names (named_parameters'), with its own lr / weight decay or, unset, the
// optimizer's.
struct ParamGroupSpec {
  std::vector<std::string> names;
  std::optional<double> lr;
  std::optional<double> weight_decay;
};

// Splits named parameters into a decayed group (matrices and embeddings) and an undecayed one
// (biases and norm weights: every parameter with fewer than 2 dims), as GPT-2/BERT recipes and
// Hugging Face's Trainer do; decay_1d puts every parameter in the decayed group (DeepSpeed's
// own behaviour, which decays whatever it is given).
std::vector<ParamGroup> default_param_groups(
    const std::vector<std::pair<std::string, Tensor*>>& named, double lr, double weight_decay,
    bool decay_1d = false);

class Optimizer;
class OneBitTransport;

// An optimizer state tensor and its state_dict name ("<param>.<slot>").
struct StateTensor {
  std::string key;
  Tensor tensor;
};

// Optimizer state kept out of memory between updates (ZeRO-Infinity's NVMe offload:
// parallel/tensor_swapper.h). With a stager, step() updates each group in sub-groups
// of at most sub_group_size() elements (a larger parameter alone), one fused call each, and
// hands the stager each sub-group's state: prefetch() the next sub-group's before this one's
// update, acquire() before it (the tensors are resident when it returns), release() after it;
// finish() once the step is done, and then prefetch() the next step's first sub-groups, which
// a stager may read while the forward and backward in between run. prefetch() returns false
// when it could not start all it was given (no room). Optimizers that update outside the
// fused step (the compressed ones) never call it.
class StateStager {
 public:
  virtual ~StateStager() = default;
  virtual int64_t sub_group_size() const = 0;
  // True: each sub-group's parameters (keyed by their names) are staged with its state, first.
  virtual bool stages_params() const { return false; }
  virtual bool prefetch(const std::vector<StateTensor>& state) = 0;
  virtual void acquire(const std::vector<StateTensor>& state) = 0;
  virtual void release(const std::vector<StateTensor>& state) = 0;
  virtual void finish() = 0;
};
// Builds an optimizer over the groups it is handed (DeepSpeed's callable client optimizer):
// the engine hands it the tensors it updates (float32 masters, ZeRO partitions).
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(std::vector<ParamGroup>)>;

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  virtual std::string name() const = 0;
  // The same optimizer (type and hyper-parameters), fresh, over other groups: how the engine
  // moves a client optimizer onto float32 master weights or ZeRO partitions. An optimizer
  // of the user's own overrides it to be usable there.
  virtual std::unique_ptr<Optimizer> rebuild(std::vector<ParamGroup> groups) const;
  void zero_grad();
  std::vector<ParamGroup>& groups() { return groups_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  // Sets every group's learning rate (a scheduler's output).
  void set_lr(double lr);
  double lr() const { return groups_.empty() ? 0.0 : groups_[0].lr; }
  // Adam's and LAMB's (beta1, beta2), which a schedule may cycle (OneCycle); false for
  // optimizers without betas.
  virtual bool set_betas(double, double) { return false; }
  virtual std::optional<std::pair<double, double>> betas() const { return std::nullopt; }
  int64_t step_count() const { return step_; }
  // Mixed precision in the same fused kernel: `copies[g][i]` is the 16-bit model tensor of
  // group g's i-th (float32) parameter. step() then reads that tensor's gradient instead of
  // the parameter's and writes the updated value back into it, cast: no separate cast passes.
  void set_model_copies(std::vector<std::vector<Tensor*>> copies);
  void set_state_stager(std::shared_ptr<StateStager> stager) { stager_ = std::move(stager); }
  // The state each parameter has ("exp_avg", ...), made on its first update.
  virtual std::vector<std::string> slot_names() const { return {}; }
  // Makes every parameter's state now (zeros); with a stager, a sub-group at a time, each
  // handed to release() as it is made.
  void initialize_state();
  // Every gradient is multiplied by this in the update (loss-scale unscaling times the
  // clipping coefficient); 1 by default.
  void set_grad_scale(double scale) { grad_scale_ = scale; }
  // Optimizers that communicate over the data-parallel ranks themselves (1-bit Adam): the
  // engine hands them a transport over its data-parallel group, and skips its gradient
  // all-reduce while reads_local_gradients() (each rank's own gradients are read).
  virtual bool takes_data_parallel_transport() const { return false; }
  virtual void set_data_parallel_transport(std::shared_ptr<OneBitTransport>) {}
  virtual bool reads_local_gradients() const { return false; }
  // State that differs between data-parallel ranks (1-bit Adam's compression errors), saved
  // by each rank in its own checkpoint file; empty: none. load_rank_state receives what this
  // rank saved (empty when it saved none) and rank 0's file (to tell a checkpoint of another
  // rank count).
  virtual std::map<std::string, Tensor> rank_state() const { return {}; }
  virtual void load_rank_state(const std::map<std::string, Tensor>& /*mine*/,
                               const std::map<std::string, Tensor>& /*rank0*/) {}
  // "<param name>.<slot>" -> tensor, plus "step" (a 0-dim int64).
  virtual std::map<std::string, Tensor> state_dict() const;
  // Restores state saved by state_dict; errors name any missing or mis-shaped entry.
  virtual void load_state_dict(const std::map<std::string, Tensor>& state);

 protected:
  // The element count of the parameter named `name`, -1 when none is.
  int64_t numel_of(const std::string& name) const;
  // The named slot (e.g. "exp_avg") of group g's i-th parameter, created as zeros on first use.
  Tensor& slot(size_t g, size_t i, const std::string& name);
  // One fused kernel call per (device, dtype) of each group: outputs are the parameters, then
  // each named slot, then the model copies (if set); inputs the gradients; params(group) the
  // kernel's hyper-parameters, whose grad_scale is then set to the optimizer's.
  void run_fused(Kernel k, const std::vector<std::string>& slots,
                 const std::function<OptimizerStepParams(const ParamGroup&)>& params);
  std::vector<ParamGroup> groups_;
  std::shared_ptr<StateStager> stager_;
  std::vector<std::vector<Tensor*>> model_copies_;
  double grad_scale_ = 1.0;
  std::map<std::string, Tensor> state_;
  int64_t step_ = 0;

 private:
  // `idx` (parameters of g) cut into the stager's sub-groups in order: at most
  // sub_group_size elements each, a larger parameter alone; without a stager, one.
  std::vector<std::vector<size_t>> sub_groups(const ParamGroup& g,
                                              const std::vector<size_t>& idx) const;
  void launch_fused(Kernel k, size_t group, const std::vector<size_t>& idx,
                    const std::vector<std::string>& slots,
                    const std::function<OptimizerStepParams(const ParamGroup&)>& params);
};

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool decoupled_weight_decay = true;  // AdamW; false = Adam with L2 (DeepSpeed adam_w_mode)
  bool bias_correction = true;
};
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, AdamOptions options = {});
  void step() override;
  std::unique_ptr<Optimizer> rebuild(std::vector<ParamGroup> groups) const override {
    return std::make_unique<Adam>(std::move(groups), options_);
  }
  bool set_betas(double beta1, double beta2) override;
  std::optional<std::pair<double, double>> betas() const override {
    return std::make_pair(options_.beta1, options_.beta2);
  }
  std::string name() const override { return options_.decoupled_weight_decay ? "AdamW" : "Adam"; }
  std::vector<std::string> slot_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  AdamOptions options_;
};

struct SGDOptions {
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
};
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, SGDOptions options = {});
  void step() override;
  std::unique_ptr<Optimizer> rebuild(std::vector<ParamGroup> groups) const override {
    return std::make_unique<SGD>(std::move(groups), options_);
  }
  std::string name() const override { return "SGD"; }
  std::vector<std::string> slot_names() const override {
    return options_.momentum != 0 ? std::vector<std::string>{"momentum_buffer"}
                                  : std::vector<std::string>{};
  }

 private:
  SGDOptions options_;
};

struct LambOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // DeepSpeed FusedLamb's
  double max_coeff = 10.0, min_coeff = 0.01;      // trust-ratio clamp (DeepSpeed's names)
  bool bias_correction = true;
};
class Lamb : public Optimizer {
 public:
  Lamb(std::vector<ParamGroup> groups, LambOptions options = {});
  void step() override;
  std::unique_ptr<Optimizer> rebuild(std::vector<ParamGroup> groups) const override {
    return std::make_unique<Lamb>(std::move(groups), options_);
  }
  bool set_betas(double beta1, double beta2) override;
  std::optional<std::pair<double, double>> betas() const override {
    return std::make_pair(options_.beta1, options_.beta2);
  }
  std::string name() const override { return "Lamb"; }
  std::vector<std::string> slot_names() const override { return {"exp_avg", "exp_avg_sq"}; }

 private:
  LambOptions options_;
};

// Scales all gradients so their global L2 norm is at most max_norm; returns the norm before
// clipping (accumulated in float64; inf/NaN gradients give a non-finite result, unclipped).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
double grad_norm(const std::vector<Tensor>& params);
// The factor gradients of global norm `norm` are multiplied by to clip them at `max_norm`:
// max_norm / (norm + 1e-6), at most 1 (torch's clip_grad_norm_ and DeepSpeed's engine alike).
// Every clipping path (the engine with and without ZeRO, clip_grad_norm) takes it from here.
double clip_coefficient(double norm, double max_norm);

// The two halves of grad_norm, for norms whose squares are summed over ranks in between (ZeRO):
// the sum of squares of the tensors' elements, accumulated in double (one multi-tensor launch
// per device and dtype), and the root rounded to the gradients' precision (float32 unless all
// are float64), as torch's clip_grad_norm_ gives it.
double sum_of_squares(const std::vector<Tensor>& tensors);
double norm_from_squares(double squares, bool float64_gradients = false);

}  // namespace tessera::optim
