#include "onebit_entries.h"

#include "tessera/optim/onebit_adam.h"
#include "tessera/optim/onebit_lamb.h"
#include "tessera/optim/zero_one_adam.h"

namespace tessera::optim {

namespace {

using K = HyperParamKind;

std::vector<double> count(int64_t v) {
  return {static_cast<double>(v)};
}

// What the three share: betas and eps, DeepSpeed's keys of its 1-bit optimizers (its
// transport, read without effect where Tessera's process group decides), AMSGrad refused,
// no ZeRO. `ds_class` names DeepSpeed's class, `algorithm` the optimizer in messages.
void add_onebit_keys(OptimizerEntry& e, double beta1, double beta2, double eps,
                     const std::string& ds_class, const std::string& algorithm) {
  e.params.insert(e.params.begin(),
                  {{"betas", K::Betas, {beta1, beta2}, "the moments' decay rates"},
                   {"eps", K::Positive, {eps}, "added to the second moment's root"}});
  const std::string takes = "DeepSpeed's " + ds_class + " takes it";
  e.params.push_back({"comm_backend_name",
                      K::Choice,
                      {0.0},
                      "DeepSpeed's transport; Tessera exchanges over the job's data-parallel "
                      "group either way (MPI between CPU ranks, NCCL between GPUs)",
                      false,
                      "",
                      {"nccl", "mpi"}});
  e.params.push_back({"cuda_aware",
                      K::Bool,
                      {0.0},
                      "DeepSpeed's CUDA-aware MPI switch",
                      false,
                      "Tessera's process group moves the bytes (MPI between CPU ranks)"});
  e.params.push_back({"bias_correction",
                      K::Bool,
                      {1.0},
                      takes,
                      false,
                      "DeepSpeed's " + algorithm +
                          " applies no bias correction whatever it says; nor does Tessera's"});
  e.params.push_back({"eps_inside_sqrt",
                      K::Bool,
                      {0.0},
                      takes,
                      false,
                      "DeepSpeed's " + algorithm + " stores it without using it"});
  e.params.push_back({"amsgrad",
                      K::Bool,
                      {0.0},
                      "must be false: " + algorithm + " has no AMSGrad (as DeepSpeed)"});
  e.has_betas = true;
  e.updates_partitions = false;
  e.no_zero_reason = "as DeepSpeed's " + algorithm + ", it exchanges whole tensors";
  e.check = [algorithm](const HyperParamValues& v) {
    TS_CHECK(!v.flag("amsgrad"), "'optimizer.params.amsgrad': ", algorithm,
             " does not support the AMSGrad variant (DeepSpeed raises too)");
    return std::vector<std::string>{};
  };
}

}  // namespace

OptimizerEntry onebit_adam_entry() {
  const OneBitAdamOptions o;
  OptimizerEntry e;
  e.type = "OneBitAdam";
  e.doc =
      "DeepSpeed's 1-bit Adam: Adam for freeze_step steps, then the variance frozen and the "
      "momentum averaged over the data-parallel ranks with error-compensated 1-bit "
      "compression (about 1/32 of the bytes); no bias correction, as DeepSpeed's";
  e.params = {{"freeze_step", K::Count, count(o.freeze_step),
               "steps of uncompressed Adam (the first one only sets the state up, as "
               "DeepSpeed's)"}};
  add_onebit_keys(e, o.beta1, o.beta2, o.eps, "OnebitAdam", "1-bit Adam");
  // The moments, and the compression's worker and server errors (1 + 1/N of a tensor).
  e.state_slots = [](const HyperParamValues&) { return int64_t{4}; };
  e.build = [](std::vector<ParamGroup> groups, const HyperParamValues& v) {
    const auto [b1, b2] = v.pair("betas");
    OneBitAdamOptions o{b1, b2, v.number("eps"), v.count("freeze_step")};
    return std::unique_ptr<Optimizer>(std::make_unique<OneBitAdam>(std::move(groups), o));
  };
  return e;
}

OptimizerEntry zero_one_adam_entry() {
  const ZeroOneAdamOptions o;
  OptimizerEntry e;
  e.type = "ZeroOneAdam";
  e.doc =
      "DeepSpeed's 0/1 Adam: the variance updated on ever fewer steps (the others average the "
      "gradients with the 1-bit all-reduce), frozen after var_freeze_step, then local steps "
      "reconciled by 1-bit all-reduces at growing intervals; no bias correction, as DeepSpeed's";
  e.params = {{"var_freeze_step", K::Count, count(o.var_freeze_step),
               "the last step that may update the variance"},
              {"var_update_scaler", K::Steps, count(o.var_update_scaler),
               "variance updates between doublings of their interval (the paper's kappa)"},
              {"local_step_scaler", K::Steps, count(o.local_step_scaler),
               "steps between doublings of the local-step interval"},
              {"local_step_clipper", K::Steps, count(o.local_step_clipper),
               "the longest local-step interval (the paper's H)"}};
  add_onebit_keys(e, o.beta1, o.beta2, o.eps, "ZeroOneAdam", "0/1 Adam");
  // The moments, the accumulator of local steps and the compression errors.
  e.state_slots = [](const HyperParamValues&) { return int64_t{5}; };
  e.build = [](std::vector<ParamGroup> groups, const HyperParamValues& v) {
    const auto [b1, b2] = v.pair("betas");
    ZeroOneAdamOptions o{b1,
                         b2,
                         v.number("eps"),
                         v.count("var_freeze_step"),
                         v.count("var_update_scaler"),
                         v.count("local_step_scaler"),
                         v.count("local_step_clipper")};
    return std::unique_ptr<Optimizer>(std::make_unique<ZeroOneAdam>(std::move(groups), o));
  };
  return e;
}

OptimizerEntry onebit_lamb_entry() {
  const OneBitLambOptions o;
  OptimizerEntry e;
  e.type = "OneBitLamb";
  e.doc =
      "DeepSpeed's 1-bit LAMB: LAMB for freeze_step steps, then the variance frozen and all "
      "momenta averaged in one 1-bit all-reduce, each tensor's trust ratio frozen and scaled "
      "by a factor from a fresh variance; no bias correction, as DeepSpeed's";
  e.params = {
      {"freeze_step", K::Count, count(o.freeze_step),
       "steps of uncompressed LAMB (the first one only sets the state up, as DeepSpeed's)"},
      {"max_coeff", K::NonNegative, {o.max_coeff}, "the trust ratio's upper clamp"},
      {"min_coeff", K::NonNegative, {o.min_coeff}, "the trust ratio's lower clamp"},
      {"coeff_beta", K::Momentum, {o.coeff_beta}, "decay of the trust ratio's running average"},
      {"factor_max", K::NonNegative, {o.factor_max}, "the factor's upper clamp"},
      {"factor_min", K::NonNegative, {o.factor_min}, "the factor's lower clamp"},
      {"factor_threshold",
       K::NonNegative,
       {o.factor_threshold},
       "the most the factor may change from one step to the next (a fraction)"}};
  add_onebit_keys(e, o.beta1, o.beta2, o.eps, "OnebitLamb", "1-bit LAMB");
  // The moments, the fresh variance and the compression errors.
  e.state_slots = [](const HyperParamValues&) { return int64_t{5}; };
  e.build = [](std::vector<ParamGroup> groups, const HyperParamValues& v) {
    const auto [b1, b2] = v.pair("betas");
    OneBitLambOptions o{b1,
                        b2,
                        v.number("eps"),
                        v.count("freeze_step"),
                        v.number("max_coeff"),
                        v.number("min_coeff"),
                        v.number("coeff_beta"),
                        v.number("factor_max"),
                        v.number("factor_min"),
                        v.number("factor_threshold")};
    return std::unique_ptr<Optimizer>(std::make_unique<OneBitLamb>(std::move(groups), o));
  };
  return e;
}

}  // namespace tessera::optim
