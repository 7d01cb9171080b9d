#include <algorithm>
#include <cmath>
#include <iostream>
#include <unordered_map>

#include "quantized_reduce_scatter.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/thread_share.h"
#include "tessera/parallel/zero_optimizer.h"
#include "zero3_fetcher.h"

namespace tessera::parallel {

namespace {

int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.nbytes() : 0;
}

// Rank r's shard of a whole tensor: float32, zero-padded to the shard size.
Tensor shard_of(const Tensor& whole, const ShardLayout::Entry& e, int rank) {
  Tensor s = zeros({e.shard}, DType::Float32, whole.device());
  const int64_t len = e.valid(rank);
  if (len > 0) s.narrow(0, 0, len).copy_(whole.reshape({-1}).narrow(0, rank * e.shard, len));
  return s;
}

}  // namespace

int64_t zero_buffer_bytes(const ShardLayout& layout, const ZeroOptions& o, DType model_dtype,
                          DType comm_dtype) {
  const int64_t world = layout.world;
  // Reduce-scatter staging (GradBuckets): up to two slots of the largest bucket, packed in
  // reverse parameter order and cut at reduce_bucket_size (one parameter at least).
  int64_t largest = 0, filled = 0, current = 0, buckets = 0;
  for (size_t k = layout.entries.size(); k-- > 0;) {
    const int64_t cost = layout.entries[k].shard * world;
    if (buckets == 0 || (filled + cost > o.reduce_bucket_size && filled > 0)) {
      ++buckets;
      filled = current = 0;
    }
    filled += cost;
    current += layout.entries[k].shard;
    largest = std::max(largest, current);
  }
  const int64_t comm = static_cast<int64_t>(itemsize(comm_dtype));
  const int64_t model = static_cast<int64_t>(itemsize(model_dtype));
  int64_t bytes = std::min<int64_t>(2, buckets) * largest * (world + 1) * comm;
  // Publishing: the whole-kept parameters' shards packed, all-gathered in chunks of at most
  // allgather_bucket_size elements.
  int64_t packed = 0, max_padded = 0, partitioned = 0;
  for (const auto& e : layout.entries) {
    const bool kept = o.stage < 3 || e.numel <= o.param_persistence_threshold;
    (kept ? packed : partitioned) += kept ? e.shard : e.shard * world;
    if (!kept) max_padded = std::max(max_padded, e.shard * world);
  }
  if (packed > 0) {  // a chunk of this rank's shards and its gathered [world, chunk] result
    const int64_t chunk = std::max<int64_t>(1, std::min(packed, o.allgather_bucket_size / world));
    bytes += chunk * (world + 1) * model;
  }
  // ZeRO-3 prefetch: gathered parameters in flight, up to the bucket size (the last one may
  // cross it).
  if (o.stage == 3 && o.prefetch_bucket_size > 0 && partitioned > 0)
    bytes += std::min(partitioned, o.prefetch_bucket_size - 1 + max_padded) * model;
  // Kept for reuse (stage3_max_reuse_distance): each kept parameter is used again within the
  // distance from where it was kept, so together they span at most the distance plus one.
  if (o.stage == 3 && o.max_reuse_distance > 0 && partitioned > 0)
    bytes += std::min(partitioned, o.max_reuse_distance + max_padded) * model;
  // hpZ: each partitioned parameter's secondary shard, from its first gather of a step to
  // the step's update.
  if (o.stage == 3 && o.hpz_partition_size > 1) bytes += partitioned / o.hpz_partition_size * model;
  return bytes;
}

ZeroOptimizer::ZeroOptimizer(nn::Module& model, std::shared_ptr<ProcessGroup> group,
                             ZeroOptions options, const OptimizerFactory& make_optimizer,
                             std::vector<optim::ParamGroup> groups)
    : group_(std::move(group)), options_(options) {
  TS_CHECK(options.stage >= 1 && options.stage <= 3, "ZeRO: stage must be 1, 2 or 3, got ",
           options.stage);
  NoGradGuard no_grad;
  params_ = model.named_parameters();
  TS_CHECK(!params_.empty(), "ZeRO: the model has no parameters");
  model_dtype_ = params_[0].second->dtype();
  device_ = params_[0].second->device();
  // offload_optimizer: the float32 masters, their gradients and the optimizer state live on
  // the host and the update runs there; only parameters and gradients stay on the GPU.
  state_device_ = options.offload_optimizer ? Device::cpu() : device_;
  pin_ = options.pin_memory && device_.is_cuda() && state_device_ != device_;
  for (auto& [name, t] : params_)
    TS_CHECK(t->dtype() == model_dtype_ && t->device() == device_, "ZeRO: parameter '", name,
             "' is ", t->describe(), "; every parameter must be ", dtype_name(model_dtype_), " on ",
             device_.str());
  // A float32 model updated where it lives (stages 1-2, no offload) needs no master copy:
  // each parameter becomes a view of a padded [world * shard] storage, and the optimizer
  // updates this rank's [shard] slice of it in place (DeepSpeed keeps a second copy).
  model_is_master_ = options.stage < 3 && model_dtype_ == DType::Float32 &&
                     options.compute_dtype == DType::Float32 && state_device_ == device_;
  // ZeRO-3's float32 shards are the masters where both live in the same place.
  shard_device_ = options.offload_param != "none" ? Device::cpu() : device_;
  shards_are_masters_ = options.stage == 3 && options.compute_dtype == DType::Float32 &&
                        state_device_ == shard_device_ && !options.param_nvme;
  // NVMe offload swaps the float32 masters too where they are a copy apart from the model.
  swap_masters_ = options.nvme && !model_is_master_ && !shards_are_masters_;
  // (The swapper moves host memory: a GPU model's gradient partition stays on the device.)
  swap_grads_ = options.nvme && options.stage >= 2 && device_.is_cpu();
  build_partitions();
  if (options.compute_dtype != model_dtype_) {
    model.to(options.compute_dtype);
    params_ = model.named_parameters();
    model_dtype_ = options.compute_dtype;
  }

  partitioned_.assign(params_.size(), false);
  if (options.stage == 3) build_shards();

  make_buckets();
  // The optimizer updates this rank's master shards of each group's parameters.
  for (auto& g : groups) {
    g.params.clear();
    for (const std::string& name : g.names) {
      const auto it = index_.find(name);
      TS_CHECK(it != index_.end(), "ZeRO: optimizer group parameter '", name,
               "' is not a parameter of the model");
      g.params.push_back(master_views_[it->second]);
    }
  }
  optimizer_ = make_optimizer(std::move(groups));
  if (options.nvme) start_swapping();
  swap_out_shards();
}

// qgZ over `group`'s nodes; none (and a note from its first rank) on one node.
std::shared_ptr<QuantizedReduceScatter> ZeroOptimizer::quantized_reduction(
    const std::shared_ptr<ProcessGroup>& group) const {
  if (!options_.quantized_gradients) return nullptr;
  std::string why;
  auto q = QuantizedReduceScatter::make(group, processes_per_host(), &why);
  if (!q && group->rank() == 0)
    std::cerr << "tessera: zero_quantized_gradients: " << why
              << ": gradients are reduce-scattered unquantized (as DeepSpeed's qgZ, which "
                 "quantizes between nodes)\n";
  return q;
}

// Each partition's reduce-scatter buckets into its gradient partition.
void ZeroOptimizer::make_buckets() {
  GradBuckets::Options bo;
  bo.bucket_numel = options_.reduce_bucket_size;
  bo.overlap = options_.overlap_comm;
  bo.pre_scale = options_.pre_scale;
  bo.comm_dtype = options_.comm_dtype;
  grad_shards_.assign(params_.size(), Tensor());
  grad_squares_.assign(params_.size(), std::nan(""));
  for (Partition& part : parts_) {
    bo.quantized = quantized_reduction(part.group);
    bo.accumulate = nullptr;
    if (swap_grads_) {
      const size_t p = static_cast<size_t>(&part - parts_.data());
      bo.accumulate = [this, p](int64_t offset, const Tensor& reduced) {
        accumulate_grad(p, offset, reduced);
      };
    } else {
      part.grad_partition = zeros({part.layout.partition_numel}, options_.comm_dtype, device_);
    }
    std::vector<Tensor*> slots;
    for (size_t i : part.params) slots.push_back(params_[i].second);
    part.buckets = std::make_unique<GradBuckets>(
        part.group, slots, GradBuckets::Mode::ReduceScatter, bo, &part.layout, part.grad_partition);
  }
}

// Splits the parameters into their partitions (experts apart with expert_params) and makes
// each rank's float32 master shards of them.
void ZeroOptimizer::build_partitions() {
  const bool experts = !options_.expert_params.empty();
  TS_CHECK(!experts || options_.expert_data_group,
           "ZeRO: expert parameters were given without their data-parallel group");
  TS_CHECK(!experts || options_.stage < 3,
           "ZeRO: stage 3 with MoE expert parallelism is not "
           "built yet; use stage 1 or 2");
  parts_.resize(experts ? 2 : 1);
  parts_[0].group = group_;
  if (experts) parts_[1].group = options_.expert_data_group;
  std::vector<std::vector<std::pair<std::string, Shape>>> shapes(parts_.size());
  place_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& name = params_[i].first;
    index_[name] = i;
    const size_t p = options_.expert_params.count(name) ? 1 : 0;
    place_[i] = {p, parts_[p].params.size()};
    parts_[p].params.push_back(i);
    shapes[p].emplace_back(name, params_[i].second->shape());
  }
  for (const std::string& name : options_.expert_params)
    TS_CHECK(index_.count(name), "ZeRO: expert parameter '", name,
             "' is not a parameter of the model");
  master_views_.resize(params_.size());
  for (size_t p = 0; p < parts_.size(); ++p)
    parts_[p].layout = ShardLayout(shapes[p], parts_[p].group->size());
  // (Before the masters are made: each goes to the swap file as soon as it is.)
  if (options_.nvme) make_swapper(*options_.nvme);
  for (size_t p = 0; p < parts_.size(); ++p) {
    Partition& part = parts_[p];
    const int world = part.group->size(), rank = part.group->rank();
    if (!model_is_master_ && !swap_masters_)
      part.master = zeros({part.layout.partition_numel}, DType::Float32, state_device_);
    if (swap_masters_ && options_.stage < 3)
      part.published =
          Tensor::empty({part.layout.partition_numel}, options_.compute_dtype, state_device_);
    for (size_t k = 0; k < part.params.size(); ++k) {
      const auto& e = part.layout.entries[k];
      Tensor& param = *params_[part.params[k]].second;
      Tensor& view = master_views_[part.params[k]];
      if (!model_is_master_) {  // (swapped: each master its own storage, swapped alone)
        view = swap_masters_ ? zeros({e.shard}, DType::Float32, state_device_)
                             : part.master.narrow(0, e.offset, e.shard);
        view.copy_(shard_of(param, e, rank));
        if (swap_masters_) swapper_->release({{e.name, view}});
        continue;
      }
      Tensor padded = zeros({e.shard * world}, DType::Float32, device_);
      padded.narrow(0, 0, e.numel).copy_(param.reshape({-1}));
      Tensor whole = Tensor::make_view(padded, e.shape, contiguous_strides(e.shape), 0);
      whole.requires_grad_(true);
      param = whole;
      view = padded.narrow(0, rank * e.shard, e.shard);
    }
  }
}

Tensor ZeroOptimizer::staged_for_device(const Tensor& host) const {
  if (!pin_) return host.to(model_dtype_);
  // Offloaded with pin_memory: cast straight into page-locked memory, so the copy to the
  // GPU that follows runs at full bus speed without the host waiting for it.
  Tensor staged = Tensor::empty_pinned(host.shape(), model_dtype_);
  staged.copy_(host);
  return staged;
}

ZeroOptimizer::~ZeroOptimizer() {
  if (!fetcher_) return;
  if (!materialize_at_end_) {
    fetcher_->detach_released();
    return;
  }
  // Leave the model usable on its own: gather every parameter for good.
  fetcher_->materialize_all();
}

void ZeroOptimizer::begin_backward(bool reduce, std::optional<double> final_scale) {
  if (swap_grads_) squares_scale_ = final_scale;
  for (auto& p : parts_) p.buckets->begin_backward(reduce);
}

GradSquares ZeroOptimizer::prepare_master_grads(double scale) {
  NoGradGuard no_grad;
  // The update writes the shards (the masters themselves in float32 stage 3): no gather
  // may still be reading them.
  if (fetcher_) fetcher_->drain();
  if (swap_grads_) return swapped_grad_squares(scale);
  for (Partition& part : parts_) {
    if (part.grad_partition.dtype() == DType::Float32 && scale == 1.0 && state_device_ == device_) {
      part.master_grads = part.grad_partition;
      continue;
    }
    // Offloaded: the reduced partition crosses to the host in the communication dtype.
    Tensor host = part.grad_partition;
    if (pin_) {
      host = Tensor::empty_pinned(part.grad_partition.shape(), part.grad_partition.dtype());
      host.copy_(part.grad_partition);
    }
    part.master_grads = host.to(state_device_).to(DType::Float32);
    if (scale != 1.0) part.master_grads.mul_(scale);
  }
  for (auto& g : optimizer_->groups())
    for (size_t k = 0; k < g.params.size(); ++k) {
      const size_t i = index_.at(g.names[k]);
      const ShardLayout::Entry& e = entry(i);
      g.params[k].set_grad(parts_[place_[i].first].master_grads.narrow(0, e.offset, e.shard));
    }
  // This rank's partition's squares in double, summed over the ranks by global_grad_norm (a
  // float32 partial norm per rank made ZeRO's losses drift from one process's by 1e-6 in 20
  // steps, against dp's 1e-7).
  auto squares = [](const Tensor& t) { return optim::sum_of_squares({t}); };
  GradSquares s;
  const Partition& dense = parts_[0];
  if (!options_.tensor_parallel_group) {
    s.replicated = squares(dense.master_grads);
  } else {
    for (const auto& e : dense.layout.entries)
      (options_.tensor_parallel_params.count(e.name) ? s.tensor_parallel : s.replicated) +=
          squares(dense.master_grads.narrow(0, e.offset, e.shard));
  }
  // The experts' partitions meet over their replicas here, over the expert-parallel group in
  // global_grad_norm.
  if (parts_.size() > 1)
    s.expert = parts_[1].group->all_reduce_scalar(squares(parts_[1].master_grads));
  return s;
}

void ZeroOptimizer::scale_master_grads(double coef) {
  NoGradGuard no_grad;
  if (swap_grads_) {
    swapped_grad_coef_ = coef;  // (applied as each sub-group's gradients are read in)
    return;
  }
  for (Partition& part : parts_) part.master_grads.mul_(coef);
}

void ZeroOptimizer::publish() {
  NoGradGuard no_grad;
  if (fetcher_) {
    fetcher_->drain();
    fetcher_->invalidate_secondary();  // (the shards change)
  }
  if (options_.stage == 3 && !swap_masters_ && !shards_are_masters_) publish_shards();
  for (Partition& part : parts_) publish(part);
  swap_out_shards();
}

void ZeroOptimizer::publish(Partition& part) {
  const int world = part.group->size();
  // Every whole-kept parameter's new values: this rank's shards, packed side by side, are
  // all-gathered in chunks of at most allgather_bucket_size gathered elements (DeepSpeed's
  // bound on this buffer, staged a chunk at a time); each chunk's pieces go to the
  // parameters they belong to.
  std::vector<size_t> whole;
  int64_t packed = 0;
  for (size_t i : part.params)
    if (!partitioned_[i]) {
      whole.push_back(i);
      packed += entry(i).shard;
    }
  if (whole.empty()) return;
  const int64_t chunk =
      std::max<int64_t>(1, std::min(packed, options_.allgather_bucket_size / world));
  for (int64_t c0 = 0; c0 < packed; c0 += chunk) {
    const int64_t n = std::min(chunk, packed - c0);
    // This rank's part of the chunk, from the master slices it spans.
    std::vector<Tensor> parts;
    int64_t offset = 0;  // a parameter's place in the packed shards
    for (size_t i : whole) {
      const int64_t shard = entry(i).shard;
      const int64_t lo = std::max(offset, c0), hi = std::min(offset + shard, c0 + n);
      const Tensor source = swap_masters_ ? published_view(i) : master_views_[i];
      if (lo < hi) parts.push_back(source.narrow(0, lo - offset, hi - lo));
      offset += shard;
    }
    const Tensor mine =
        staged_for_device(parts.size() == 1 ? parts[0] : cat(parts)).to(device_).contiguous();
    Tensor gathered = Tensor::empty({n * world}, model_dtype_, device_);
    part.group->all_gather(gathered, mine);
    const Tensor by_rank = gathered.view({world, n});
    offset = 0;
    for (size_t i : whole) {
      const auto& e = entry(i);
      const int64_t lo = std::max(offset, c0), hi = std::min(offset + e.shard, c0 + n);
      if (lo < hi) {
        Tensor flat = params_[i].second->reshape({-1});
        for (int r = 0; r < world; ++r) {
          const int64_t first = r * e.shard + (lo - offset);
          if (first >= e.numel) continue;  // padding
          const int64_t len = std::min(hi - lo, e.numel - first);
          flat.narrow(0, first, len).copy_(by_rank.select(0, r).narrow(0, lo - c0, len));
        }
      }
      offset += e.shard;
    }
  }
}

void ZeroOptimizer::zero_grad() {
  NoGradGuard no_grad;
  for (Partition& part : parts_) {
    if (part.grad_partition.defined()) part.grad_partition.zero_();
    part.master_grads = Tensor();
  }
  // (Swapped: the next reduction starts each anew; its region in the file is reused.)
  for (Tensor& g : grad_shards_) g = Tensor();
  std::fill(grad_squares_.begin(), grad_squares_.end(), std::nan(""));
  optimizer_->zero_grad();
  for (auto& [n, t] : params_) t->set_grad(Tensor());
  release_parameters();
}

void ZeroOptimizer::release_parameters() {
  if (fetcher_) fetcher_->end_step();
}

void ZeroOptimizer::set_evaluating(bool on) {
  if (fetcher_) fetcher_->set_evaluating(on);
}

PrefetchStats ZeroOptimizer::prefetch_stats() const {
  return fetcher_ ? fetcher_->stats() : PrefetchStats{};
}

MemoryStats ZeroOptimizer::memory() const {
  MemoryStats m;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!partitioned_[i])  // (padded storages when the model is the master)
      m.params +=
          model_is_master_ ? params_[i].second->storage()->nbytes() : bytes_of(*params_[i].second);
  if (param_shards_.defined() && !shards_are_masters_) m.params += bytes_of(param_shards_);
  if (!param_shards_.defined())  // (offload_param "nvme": shards apart; swapped ones out)
    for (const Tensor& shard : shard_views_)
      if (shard.defined() && shard.storage()->resident()) m.params += bytes_of(shard);
  const int64_t item = static_cast<int64_t>(itemsize(model_dtype_));
  for (const Partition& part : parts_) {
    // Stage 1 keeps full gradients between boundaries (autograd's, accumulated).
    if (options_.stage == 1) m.grads += part.layout.total_numel() * item;
    m.grads += bytes_of(part.grad_partition);
    for (size_t i : part.params)  // (swapped: those in memory)
      if (grad_shards_[i].defined() && grad_shards_[i].storage()->resident())
        m.grads += bytes_of(grad_shards_[i]);
    if (shards_are_masters_)
      m.params += bytes_of(part.master);  // the shard is the master
    else
      m.optimizer += bytes_of(part.master) + bytes_of(part.published);
    m.buffers += zero_buffer_bytes(part.layout, options_, model_dtype_, options_.comm_dtype);
  }
  for (auto& [k, v] : optimizer_->state_dict())
    if (k != "step" && v.storage()->resident()) m.optimizer += bytes_of(v);
  if (swap_masters_)
    for (const Tensor& master : master_views_)
      if (master.storage()->resident()) m.optimizer += bytes_of(master);
  for (const TensorSwapper* s : {swapper_.get(), shard_swapper_.get()})
    if (s) {
      m.disk += s->stats().disk_bytes;
      m.swap += s->stats().peak_resident_bytes;
    }
  return m;
}

std::map<std::string, Tensor> ZeroOptimizer::shard_state() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i) out[params_[i].first] = master_views_[i];
  for (auto& [k, v] : optimizer_->state_dict())
    if (k != "step") out[k] = v;
  return out;
}

void ZeroOptimizer::load_full_state(const std::map<std::string, Tensor>& masters,
                                    const std::map<std::string, Tensor>* optimizer_state) {
  std::map<std::string, Tensor> master_shards, state_shards;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& e = entry(i);
    auto it = masters.find(e.name);
    TS_CHECK(it != masters.end(), "ZeRO checkpoint: no values for parameter '", e.name, "'");
    TS_CHECK(it->second.numel() == e.numel, "ZeRO checkpoint: '", e.name, "' has ",
             it->second.numel(), " elements, the model's parameter ", e.numel);
    master_shards[e.name] = shard_of(it->second, e, parts_[place_[i].first].group->rank());
  }
  if (!optimizer_state) return load_partition_state(master_shards, nullptr);
  for (const auto& [k, v] : *optimizer_state) {
    if (k == "step") {
      state_shards[k] = v;
      continue;
    }
    bool is_param = false;  // optimizer keys are "<param>.<slot>", never a bare parameter
    const ShardLayout::Entry* e = nullptr;
    int rank = 0;
    for (const Partition& part : parts_)
      if (!e && (e = part.layout.owner_of(k, &is_param))) rank = part.group->rank();
    TS_CHECK(e && !is_param, "ZeRO checkpoint: optimizer state '", k,
             "' belongs to no parameter of this model");
    state_shards[k] = shard_of(v, *e, rank);
  }
  load_partition_state(master_shards, &state_shards);
}

void ZeroOptimizer::load_partition_state(const std::map<std::string, Tensor>& masters,
                                         const std::map<std::string, Tensor>* optimizer_state) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& e = entry(i);
    auto it = masters.find(e.name);
    TS_CHECK(it != masters.end() && it->second.numel() == e.shard, "ZeRO checkpoint: no shard of ",
             e.shard, " elements for parameter '", e.name, "'");
    master_views_[i].copy_(it->second);
    if (swap_masters_) swapper_->release({{e.name, master_views_[i]}});  // (one at a time)
  }
  if (optimizer_state) optimizer_->load_state_dict(*optimizer_state);
  if (swap_masters_) publish_masters_from_memory();
  swap_out_state();
  publish();
}

}  // namespace tessera::parallel
