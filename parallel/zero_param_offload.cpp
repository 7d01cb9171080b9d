// ZeRO-3's parameter shards and where offload_param puts them: beside the masters (the masters
// themselves in float32), in host memory ("cpu"), or in a swap file ("nvme", ZeRO-Infinity),
// read ahead of their gathers by the fetcher (parallel/zero3_fetcher.h).
#include <algorithm>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/zero_optimizer.h"
#include "zero3_fetcher.h"

namespace tessera::parallel {

std::vector<bool> swapped_param_shards(const ShardLayout& layout, const ZeroOptions& options) {
  std::vector<bool> swapped(layout.entries.size(), false);
  int64_t in_cpu = 0;  // elements of partitioned shards kept in memory
  for (size_t i = 0; i < layout.entries.size(); ++i) {
    const ShardLayout::Entry& e = layout.entries[i];
    if (e.numel <= options.param_persistence_threshold) continue;
    swapped[i] = in_cpu + e.shard > options.param_max_in_cpu;
    if (!swapped[i]) in_cpu += e.shard;
  }
  return swapped;
}

std::shared_ptr<ProcessGroup> ZeroOptimizer::hpz_group(int world) const {
  const int64_t h = options_.hpz_partition_size;
  if (h <= 1) return nullptr;
  TS_CHECK(world % h == 0, "'zero_optimization.zero_hpz_partition_size' is ", h,
           ", which does not divide the ", world,
           " ranks ZeRO partitions over (hpZ's groups are that many consecutive ranks)");
  std::vector<int> ranks;
  const int first = static_cast<int>(group_->rank() / h * h);
  for (int r = first; r < first + h; ++r) ranks.push_back(r);
  return group_->new_group(ranks);
}

void ZeroOptimizer::build_shards() {
  TS_CHECK(options_.offload_param == "none" || options_.stage == 3,
           "ZeRO: offload_param needs stage 3 (it offloads the partitioned parameters)");
  const Partition& part = parts_[0];  // (no experts: refused by build_partitions)
  const int world = group_->size();
  const bool nvme = options_.param_nvme.has_value();
  const int64_t P = part.layout.partition_numel;
  if (shards_are_masters_)
    param_shards_ = part.master;
  else if (!nvme)
    param_shards_ = options_.param_pin_memory && device_.is_cuda() && shard_device_.is_cpu()
                        ? Tensor::empty_pinned({P}, model_dtype_)
                        : Tensor::empty({P}, model_dtype_, shard_device_);
  Zero3FetchOptions fo;
  fo.prefetch_numel = options_.prefetch_bucket_size;
  fo.max_live_numel = options_.max_live_parameters;
  fo.max_reuse_distance = options_.max_reuse_distance;
  fo.quantized = options_.quantized_weights;
  fo.hpz_group = hpz_group(world);
  fetcher_ = std::make_shared<Zero3Fetcher>(group_, fo);
  if (nvme) {
    NvmeOffloadOptions o = *options_.param_nvme;
    o.pipeline_read = true;  // shards are read ahead of their gathers
    o.element_bytes = static_cast<int64_t>(itemsize(model_dtype_));
    shard_swapper_ =
        std::make_shared<TensorSwapper>(o, "param-rank" + std::to_string(group_->rank()));
    fetcher_->set_shard_swapper(shard_swapper_);
  }
  shard_views_.resize(params_.size());
  shard_swapped_.assign(params_.size(), false);
  const std::vector<bool> swapped = swapped_param_shards(part.layout, options_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& e = entry(i);
    Tensor& shard = shard_views_[i];
    shard = param_shards_.defined() ? param_shards_.narrow(0, e.offset, e.shard)
                                    : Tensor::empty({e.shard}, model_dtype_, shard_device_);
    if (!shards_are_masters_) shard.copy_(master_views_[i].to(shard_device_));
    if (swap_masters_)  // (read back in for the copy: its copy on disk is the same)
      swapper_->discard({{params_[i].first, master_views_[i]}});
    if (e.numel <= options_.param_persistence_threshold) continue;
    partitioned_[i] = true;
    shard_swapped_[i] = nvme && swapped[place_[i].second];
    // The parameter becomes a view of a padded [world * shard] storage that is gathered
    // on use; autograd, hooks and the model keep the same tensor.
    Tensor padded = Tensor::empty({e.shard * world}, model_dtype_, device_);
    Tensor param = Tensor::make_view(padded, e.shape, contiguous_strides(e.shape), 0);
    param.requires_grad_(true);
    *params_[i].second = param;
    fetcher_->add(padded, shard, shard_swapped_[i] ? e.name : std::string());
    padded.storage()->set_fetcher(fetcher_);
    padded.storage()->release();
    shard_written(i);  // (a swapped shard goes to its file now: one in memory at a time)
  }
}

void ZeroOptimizer::publish_shards() {
  if (param_shards_.defined()) {
    param_shards_.copy_(pin_ ? staged_for_device(parts_[0].master) : parts_[0].master);
    return;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& shard = shard_views_[i];
    shard.storage()->make_resident();  // (overwritten whole: a swapped one is not read in)
    shard.copy_(master_views_[i].to(shard_device_));
    shard_written(i);
  }
}

void ZeroOptimizer::shard_written(size_t i) {
  if (shard_swapped_.empty() || !shard_swapped_[i]) return;
  shard_swapper_->release({{params_[i].first, shard_views_[i]}});
}

void ZeroOptimizer::swap_out_shards() {
  if (!shard_swapper_) return;
  std::vector<optim::StateTensor> changed;
  for (size_t i = 0; i < params_.size(); ++i)
    if (shard_swapped_[i] && shard_views_[i].storage()->resident())
      changed.push_back({params_[i].first, shard_views_[i]});
  shard_swapper_->release(changed);
  shard_swapper_->finish();
}

}  // namespace tessera::parallel
