// The flops profiler, after DeepSpeed's: while started, every kernel the model runs on this
// thread is counted (tessera/kernel_cost.h says how) and attributed to the innermost open
// module scope (module_scope.h), and each module's forward is timed. The report is
// DeepSpeed's print_model_profile: a summary, the top modules per depth by params, MACs and
// latency, and the module tree with each module's share.
//
//   nn::FlopsProfiler prof(model);
//   prof.start_profile();
//   Tensor loss = model.loss(batch);
//   prof.stop_profile();
//   std::cout << prof.model_profile();
//
// Or in one call: nn::get_model_profile(model, batch). The engine runs it at
// flops_profiler.profile_step when the config enables it.
#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tessera/dispatch.h"
#include "tessera/grad_mode.h"
#include "tessera/nn/loss_model.h"
#include "tessera/nn/module_scope.h"

namespace tessera::nn {

struct FlopsProfileOptions {
  int64_t module_depth = -1;  // aggregated profile down to this depth (-1: all)
  int64_t top_modules = 1;    // modules listed per depth
  bool detailed = true;       // the module tree with each module's figures
};

// What the engine knows beyond the model: printed in the summary when set (DeepSpeed prints
// them when the profiler runs inside its engine). Latencies in seconds.
struct FlopsProfileSummary {
  int64_t profile_step = 1;
  int64_t world_size = 1, data_parallel_size = 1, model_parallel_size = 1;
  int64_t micro_batch_size = 0;  // samples per forward on one rank
  int64_t forwards = 1;          // forwards profiled (the step's micro-batches)
  std::optional<double> forward_latency, backward_latency, step_latency;
  double recompute_fwd_factor = 0.0;
  double peak_flops = 0.0;  // the device's peak FLOP/s at the training dtype (0: unknown)
  std::string peak_source;  // "NVIDIA H100 80GB HBM3, bfloat16 dense"
};

class FlopsProfiler : private KernelObserver, private ModuleObserver {
 public:
  explicit FlopsProfiler(Module& model);
  ~FlopsProfiler() override;
  FlopsProfiler(const FlopsProfiler&) = delete;
  FlopsProfiler& operator=(const FlopsProfiler&) = delete;

  // Resets the figures and starts counting this thread's kernels and module calls.
  void start_profile();
  // Counts again after a stop, adding to the figures (the next micro-batch of a step).
  void resume_profile();
  // Stops counting; the figures stay until the next start or end_profile.
  void stop_profile();
  void end_profile();
  bool started() const { return started_; }

  struct Figures {
    int64_t params = 0, flops = 0, macs = 0;
    double duration = 0;  // seconds in the module's forward calls
  };
  // A module's figures, its submodules' included (DeepSpeed's get_module_flops/macs/duration).
  Figures figures(const Module& m) const;
  int64_t total_flops() const { return figures(model_).flops; }
  int64_t total_macs() const { return figures(model_).macs; }
  int64_t total_params() const { return figures(model_).params; }
  double total_duration() const { return figures(model_).duration; }

  // DeepSpeed's print_model_profile text.
  std::string model_profile(const FlopsProfileSummary& summary = {},
                            const FlopsProfileOptions& options = {}) const;

 private:
  struct Node {
    const Module* module;
    std::string name;  // attribute name under its parent ("" for the root)
    int depth;
    std::vector<size_t> children;
    int64_t params = 0, flops = 0, macs = 0;  // flops/macs: its own kernels only
    double duration = 0;
    std::vector<std::chrono::steady_clock::time_point> open;  // nested calls' start times
  };
  void kernel_begin(Kernel k, Device device, const KernelCall& call) override;
  void kernel_end(Kernel, Device, const KernelCall&) override {}
  void module_enter(const Module& m) override;
  void module_exit(const Module& m) override;
  size_t add_node(const Module& m, std::string name, int depth);
  Figures total(size_t node) const;
  std::string tree(size_t node, const Figures& whole) const;
  std::string aggregated(const FlopsProfileOptions& options) const;

  Module& model_;
  std::vector<Node> nodes_;
  std::map<const Module*, size_t> index_;
  std::vector<size_t> stack_;  // open scopes, innermost last
  Device device_;
  bool started_ = false;
};

// The device's peak dense FLOP/s at `dtype` where known (NVIDIA H100/H200/A100), else 0;
// `source` names what the figure is.
double peak_flops(Device device, DType dtype, std::string* source = nullptr);

// Profiles one forward of `model` on `batch` (after `warm_up` unprofiled ones), without
// recording a graph, as DeepSpeed's get_model_profile does.
struct ModelProfile {
  int64_t flops = 0, macs = 0, params = 0;
  double duration = 0;
  std::string text;  // the report (model_profile)
};
template <class Batch>
ModelProfile get_model_profile(LossModel<Batch>& model, const Batch& batch,
                               const FlopsProfileOptions& options = {}, int warm_up = 1) {
  Module& m = model;
  NoGradGuard no_grad;
  for (int i = 0; i < warm_up; ++i) {
    ModuleScope scope(m);
    model.loss(batch);
  }
  FlopsProfiler prof(m);
  prof.start_profile();
  {
    ModuleScope scope(m);
    model.loss(batch);
  }
  prof.stop_profile();
  return {prof.total_flops(), prof.total_macs(), prof.total_params(), prof.total_duration(),
          prof.model_profile({}, options)};
}

}  // namespace tessera::nn
