// ZeRO (Rajbhandari et al., 2020) over a data-parallel group, DeepSpeed's
// zero_optimization.stage:
//   1: each rank keeps the optimizer state (float32 master weights and moments) of its
//      partition only; gradients are reduce-scattered to their owners once per
//      accumulation boundary; updated parameters are all-gathered after the step.
//   2: also the gradients: buckets are reduce-scattered as backward produces them, every
//      micro-step, and the full gradients are freed at once.
//   3: also the parameters: a rank holds its shard; a parameter's storage is gathered just
//      before an op uses it (forward and backward) and released right after. Parameters of
//      at most stage3_param_persistence_threshold elements stay whole on every rank.
//      Gathers start ahead of use, up to stage3_prefetch_bucket_size elements, in the order
//      the previous step used the parameters (parallel/zero3_fetcher.h).
// offload_optimizer {"device": "cpu"} (ZeRO-Offload) keeps a GPU model's float32 masters,
// their gradients and the optimizer state on the host and runs the update there (the CPU's
// vectorised fused kernel); each step moves the reduced gradient partition to the host and
// the updated parameters back. With CPU tensors everything is on the host already.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/grad_buckets.h"
#include "tessera/parallel/grad_norm.h"
#include "tessera/parallel/shard_layout.h"
#include "tessera/parallel/tensor_swapper.h"
#include "tessera/parallel/zero_config.h"

namespace tessera::parallel {

struct ZeroOptions {
  int stage = 1;
  DType compute_dtype = DType::Float32;  // the model computes in this (16-bit: mixed precision)
  int64_t reduce_bucket_size = ZeroConfig().reduce_bucket_size;  // elements (DeepSpeed's)
  bool overlap_comm = true;
  double pre_scale = 1.0;  // prescale_gradients: 1 / gradient_predivide_factor
  DType comm_dtype = DType::Float32;
  int64_t param_persistence_threshold = ZeroConfig().stage3_param_persistence_threshold;
  // Elements gathered ahead of use; 0: none.
  int64_t prefetch_bucket_size = ZeroConfig().stage3_prefetch_bucket_size;
  bool offload_optimizer = false;  // masters and optimizer state on the host (GPU models)
  bool pin_memory = false;  // offloaded GPU models: stage host<->GPU transfers in pinned memory
  // offload_optimizer {"device": "nvme"}: the optimizer state in a swap file (implies
  // offload_optimizer), and at stages 2-3 on CPU ranks the gradient partition too; see
  // parallel/tensor_swapper.h.
  std::optional<NvmeOffloadOptions> nvme;
  // Stage 3 (DeepSpeed's parameter coordinator, parallel/zero3_fetcher.h): gathered elements
  // at which prefetching stops; reuse distance in elements below which a parameter stays
  // gathered until its next use.
  int64_t max_live_parameters = ZeroConfig().stage3_max_live_parameters;
  int64_t max_reuse_distance = ZeroConfig().stage3_max_reuse_distance;
  // offload_param (stage 3): "cpu" keeps this rank's shards in host memory (a GPU model's
  // gathers copy them to the device); "nvme" keeps them in a swap file (param_nvme:
  // buffer_numel is buffer_size), except the first param_max_in_cpu elements of shards.
  std::string offload_param = "none";
  std::optional<NvmeOffloadOptions> param_nvme;
  int64_t param_max_in_cpu = ZeroConfig().offload_param_max_in_cpu;
  bool param_pin_memory = false;
  int64_t allgather_bucket_size = ZeroConfig().allgather_bucket_size;  // per all-gather
  // zero_quantized_weights (ZeRO++ qwZ, stage 3): gathers move int8 blocks and their scales
  // (tessera/quantized_blocks.h) instead of the parameters' own dtype.
  bool quantized_weights = false;
  // zero_hpz_partition_size (ZeRO++ hpZ, stage 3): a secondary partition of each parameter
  // over groups of this many consecutive ranks, which gathers after the step's first use
  // (backward's) stay inside; 1: none. It must divide the group's size.
  int64_t hpz_partition_size = 1;
  // zero_quantized_gradients (ZeRO++ qgZ, stage 3): gradients reduced by int4 all-to-alls
  // inside and across nodes (parallel/quantized_reduce_scatter.h) instead of reduce-scattered.
  bool quantized_gradients = false;
  // Tensor parallelism (the ZeRO group is then the data-parallel group of one tensor-
  // parallel rank): the parameters, by name, that are shards across this group. The gradient
  // norm sums their squares over it and counts every other (replicated) parameter once.
  std::shared_ptr<ProcessGroup> tensor_parallel_group;
  std::set<std::string> tensor_parallel_params;
  // MoE expert parallelism (stages 1-2): these parameters, by name (the experts this rank
  // holds), are partitioned over expert_data_group, the ranks holding the same experts,
  // instead of the whole group; their squares come back as GradSquares::expert, summed over
  // that group.
  std::shared_ptr<ProcessGroup> expert_data_group;
  std::set<std::string> expert_params;
};

// The options the config's zero_optimization and aio sections give (stage, buckets, the
// stage-3 fetch keys, offload, ZeRO++); the engine adds the dtypes, gradient pre-scaling and
// the tensor-parallel and expert groups, estimate-memory reads the same fields.
ZeroOptions zero_options(const io::TrainConfig& c);

// Stage-3 parameter gathers of training passes so far, and how many of them were started
// ahead of use; peak_live_numel: elements of gathered parameters (in use, kept for reuse, or
// on their way) at once, at most.
struct PrefetchStats {
  int64_t gathers = 0;
  int64_t prefetched = 0;
  int64_t peak_live_numel = 0;
};

class Zero3Fetcher;

// Bytes one rank holds (docs/parallelism.md: "ZeRO memory"): params (whole parameters, or this
// rank's shards), grads (whole gradients and/or this rank's partition), optimizer (float32 masters
// where kept apart from the model, and the optimizer's moments), buffers (communication
// staging at its peak: the reduce-scatter buckets, the all-gather chunks that publish new
// parameters, and ZeRO-3's prefetch; each bounded by its bucket size).
// offload_optimizer "nvme": disk is the swap file's bytes, swap the host memory the swap
// used at its peak (state read in and its aligned buffers); optimizer then counts only the
// state in memory between steps.
struct MemoryStats {
  int64_t params = 0, grads = 0, optimizer = 0, buffers = 0, disk = 0, swap = 0;
};

// The `buffers` figure for a ZeRO run: what MemoryStats::buffers reports, computed from the
// layout and options alone (tessera estimate-memory uses it before any run).
int64_t zero_buffer_bytes(const ShardLayout& layout, const ZeroOptions& options, DType model_dtype,
                          DType comm_dtype);

// offload_param "nvme" (ZeRO-3): per layout entry, whether its shard lives in the swap file:
// the partitioned parameters (more than param_persistence_threshold elements) past the first
// param_max_in_cpu elements of shards, in layout order (DeepSpeed's max_in_cpu). The run and
// tessera estimate-memory both ask this.
std::vector<bool> swapped_param_shards(const ShardLayout& layout, const ZeroOptions& options);

using OptimizerFactory = optim::OptimizerFactory;

class ZeroOptimizer {
 public:
  // Partitions `model`'s parameters over `group` and casts the model to
  // options.compute_dtype. The float32 masters start from the model's values before the
  // cast, which must be identical on every rank (the engine broadcasts rank 0's first).
  // `groups` name the parameters of each optimizer group (params empty): the optimizer made by
  // make_optimizer updates this rank's master shards of them, with each group's lr and weight
  // decay; a parameter in no group is not updated.
  ZeroOptimizer(nn::Module& model, std::shared_ptr<ProcessGroup> group, ZeroOptions options,
                const OptimizerFactory& make_optimizer, std::vector<optim::ParamGroup> groups);
  // Stage 3: gathers every parameter whole for good, so the model stays usable without this
  // optimizer (unless keep_partitioned()).
  ~ZeroOptimizer();
  // Stage 3: the model goes with this optimizer (launch::Job's), so its destruction gathers
  // nothing: a ZeRO-Infinity model need not fit in memory whole at the end either.
  void keep_partitioned() { materialize_at_end_ = false; }

  // final_scale: this backward's reductions give the final gradients of the step, which
  // prepare_master_grads will scale by this (swapped gradients then take their squares for
  // the norm as they are reduced, instead of being read back for it).
  void begin_backward(bool reduce, std::optional<double> final_scale = std::nullopt);
  void end_backward() {
    for (auto& p : parts_) p.buckets->end_backward();
  }

  // Gives every master shard its gradient: the reduced partition times `scale` (averaging
  // over ranks and undoing the loss scale), in float32. Returns this rank's squares of them
  // (parallel::global_grad_norm with this optimizer's group as the partition group).
  GradSquares prepare_master_grads(double scale);
  ProcessGroup& group() { return *group_; }
  // With expert_params: the experts' layout over, and, their data-parallel group (else null).
  const ShardLayout* expert_layout() const {
    return parts_.size() > 1 ? &parts_[1].layout : nullptr;
  }
  ProcessGroup* expert_data_group() const {
    return parts_.size() > 1 ? parts_[1].group.get() : nullptr;
  }
  void scale_master_grads(double coef);
  optim::Optimizer& optimizer() { return *optimizer_; }
  // After an optimizer step: new parameter values reach the model (all-gather for stages
  // 1-2 and persistent parameters; new shards for stage 3).
  void publish();
  void zero_grad();
  // Stage 3: ends a step: releases every gathered parameter (also after a forward without
  // backward) and starts the next step's first gathers.
  void release_parameters();
  PrefetchStats prefetch_stats() const;
  // offload_optimizer "nvme": writes out the optimizer state that a checkpoint read or loaded
  // (so memory holds none of it between steps); a no-op otherwise.
  void swap_out_state();
  // offload_optimizer "nvme": bytes moved and held by the swapper (null without).
  const TensorSwapper* swapper() const { return swapper_.get(); }
  // offload_param "nvme": the parameter shards' swapper (null without).
  const TensorSwapper* shard_swapper() const { return shard_swapper_.get(); }
  // Stage 3: forwards of a model in eval mode gather on use, outside the prefetch order.
  void set_evaluating(bool on);

  // The layout of the parameters partitioned over group() (all but the experts).
  const ShardLayout& layout() const { return parts_[0].layout; }
  int stage() const { return options_.stage; }
  MemoryStats memory() const;

  // This rank's shards: "<param>" (float32 master) and "<param>.<slot>" optimizer state
  // (experts: shards of their layout).
  std::map<std::string, Tensor> shard_state() const;
  // Restores from whole (unsharded) tensors, as consolidated from any number of saved shards
  // or saved without ZeRO: masters by parameter name, optimizer state as state_dict() names
  // it ("<param>.<slot>" and "step"); sets the model's parameters to the masters. A null
  // optimizer_state keeps the optimizer's own (load_optimizer_states = false).
  void load_full_state(const std::map<std::string, Tensor>& masters,
                       const std::map<std::string, Tensor>* optimizer_state);
  // Restores from this rank's shards (parallel::load_zero_partition; experts: shards of their
  // layout): "<param>" and "<param>.<slot>" of [shard] elements, and "step"; null keeps the
  // optimizer's own state.
  void load_partition_state(const std::map<std::string, Tensor>& masters,
                            const std::map<std::string, Tensor>* optimizer_state);

 private:
  // `host` (float32 masters) in the model dtype, ready to go to the GPU.
  Tensor staged_for_device(const Tensor& host) const;

  // Parameters partitioned over one group: the data-parallel group's, or (MoE) the experts'
  // over their replicas.
  struct Partition {
    std::shared_ptr<ProcessGroup> group;
    ShardLayout layout;
    std::vector<size_t> params;  // indices into params_, in layout order
    Tensor master;  // [partition] float32 (undefined when the model is the master or swapped)
    // NVMe-swapped masters (stages 1-2): their values in the model dtype, written as each
    // sub-group updates, which publish() all-gathers (so it never reads a master back).
    Tensor published;
    Tensor grad_partition;
    Tensor master_grads;  // float32 gradients of master (a view of grad_partition if f32)
    std::unique_ptr<GradBuckets> buckets;
  };
  const ShardLayout::Entry& entry(size_t param) const {
    return parts_[place_[param].first].layout.entries[place_[param].second];
  }
  void build_partitions();
  // offload_optimizer "nvme" (zero_nvme.cpp): the swapper, staging the masters too when they
  // are apart from the model; where a master's new value goes for publish.
  void make_swapper(const NvmeOffloadOptions& nvme);
  void start_swapping();
  Tensor published_view(size_t param);
  // Swapped masters: every master's value into its published view (at start, after a load).
  void publish_masters_from_memory();
  class MasterStager;
  // NVMe offload: elements of one staging buffer, the largest sub-group of this rank's
  // partitions (sub_group_size, or a larger shard alone, or the whole partition if smaller).
  int64_t nvme_buffer_numel(int64_t sub_group_size) const;
  void make_buckets();
  void publish(Partition& part);
  // Stage 3 (zero_param_offload.cpp): this rank's model-dtype shards of the parameters, where
  // offload_param puts them, filled from the masters; the partitioned parameters become
  // released views gathered by the fetcher.
  void build_shards();
  std::shared_ptr<QuantizedReduceScatter> quantized_reduction(
      const std::shared_ptr<ProcessGroup>& group) const;
  // hpZ: this rank's group of hpz_partition_size consecutive ranks (null when off).
  std::shared_ptr<ProcessGroup> hpz_group(int world) const;
  // The masters' new values into the shards (when they are not the masters).
  void publish_shards();
  // offload_optimizer "nvme" on CPU ranks, stages 2-3 (zero_grad_swap.cpp): this rank's
  // gradient partition lives in the swap file too, a tensor per parameter: each bucket's
  // reduced shard is added in (read back first from the second micro-step of an accumulation
  // on) and written out; the norm reads them once, the update with their sub-group's state.
  class GradStager;
  void accumulate_grad(size_t part, int64_t offset, const Tensor& reduced);
  GradSquares swapped_grad_squares(double scale);
  static double squares_of(const Tensor& grad, double scale);
  // The optimizer's stager: `inner`, wrapped to stage the gradients when they are swapped.
  std::shared_ptr<optim::StateStager> grad_stager(std::shared_ptr<optim::StateStager> inner);
  // A swapped gradient and its key in the swap file.
  optim::StateTensor grad_entry(size_t param) const {
    return {params_[param].first + "#grad", grad_shards_[param]};
  }
  // offload_param "nvme": a swapped shard given new values goes back to its file (so the
  // shards are in memory one at a time); swap_out_shards writes any still in memory.
  void shard_written(size_t param);
  void swap_out_shards();

  std::shared_ptr<ProcessGroup> group_;
  ZeroOptions options_;
  Device device_ = Device::cpu();        // the model's parameters and gradients
  Device state_device_ = Device::cpu();  // masters and optimizer state
  bool pin_ = false;                     // offloaded transfers staged in pinned host memory
  std::vector<Partition> parts_;         // [0]: over group_; [1]: the experts (expert_params)
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<size_t, size_t>> place_;  // per parameter: (partition, entry)
  std::map<std::string, size_t> index_;           // parameter name -> index in params_
  std::vector<bool> partitioned_;                 // stage 3 and above the persistence threshold
  DType model_dtype_ = DType::Float32;
  // Per parameter, this rank's float32 [shard] master values: views of its partition's
  // master, or of the parameter's own padded storage when model_is_master_ (float32 stages 1-2).
  std::vector<Tensor> master_views_;
  bool model_is_master_ = false;
  // Stage 3: this rank's model-dtype shards, one per parameter (shard_views_): views of
  // param_shards_, which is the master itself when shards_are_masters_; with offload_param
  // "nvme" each its own storage (shard_swapped_: in shard_swapper_'s file).
  Tensor param_shards_;
  std::vector<Tensor> shard_views_;
  std::vector<bool> shard_swapped_;
  bool shards_are_masters_ = false;
  Device shard_device_ = Device::cpu();
  std::shared_ptr<TensorSwapper> shard_swapper_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<TensorSwapper> swapper_;
  bool swap_masters_ = false;        // NVMe: the float32 masters are swapped too
  bool swap_grads_ = false;          // NVMe: the gradient partition is swapped (grad_shards_)
  std::vector<Tensor> grad_shards_;  // per parameter, [shard] (comm dtype); undefined: none yet
  // What the update multiplies swapped gradients by, in the order the in-memory path does:
  // prepare_master_grads' scale, then scale_master_grads' clipping coefficient.
  double swapped_grad_scale_ = 1.0, swapped_grad_coef_ = 1.0;
  bool swapped_grads_ready_ = false;  // from the norm's pass to the end of the update
  // Squares of each swapped gradient's final value (times squares_scale_), taken as it was
  // reduced (begin_backward's final_scale); NaN where not taken.
  std::vector<double> grad_squares_;
  std::optional<double> squares_scale_;
  std::shared_ptr<Zero3Fetcher> fetcher_;
  bool materialize_at_end_ = true;
};

}  // namespace tessera::parallel
