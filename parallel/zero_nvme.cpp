// ZeroOptimizer's offload to NVMe (offload_optimizer {"device": "nvme"}): the optimizer state,
// and the float32 masters where they are a copy apart from the model, in a swap file
// (parallel/tensor_swapper.h).
#include <algorithm>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/zero_optimizer.h"

namespace tessera::parallel {

// Stages each sub-group's masters with its state; before their new values are written out,
// they go (cast to the model dtype) where publish() reads them, so a step never reads a master
// back from disk to share it.
class ZeroOptimizer::MasterStager : public optim::StateStager {
 public:
  MasterStager(ZeroOptimizer& zero, std::shared_ptr<TensorSwapper> swapper)
      : zero_(zero), swapper_(std::move(swapper)) {}
  int64_t sub_group_size() const override { return swapper_->sub_group_size(); }
  bool stages_params() const override { return true; }
  bool prefetch(const std::vector<optim::StateTensor>& state) override {
    return swapper_->prefetch(state);
  }
  void acquire(const std::vector<optim::StateTensor>& state) override { swapper_->acquire(state); }
  void release(const std::vector<optim::StateTensor>& state) override {
    NoGradGuard no_grad;
    for (const optim::StateTensor& s : state) {
      const auto it = zero_.index_.find(s.key);
      if (it == zero_.index_.end()) continue;  // (optimizer state)
      Tensor to = zero_.published_view(it->second);
      to.copy_(s.tensor.to(to.device()));
      zero_.shard_written(it->second);
    }
    swapper_->release(state);
  }
  void finish() override { swapper_->finish(); }

 private:
  ZeroOptimizer& zero_;
  std::shared_ptr<TensorSwapper> swapper_;
};

void ZeroOptimizer::make_swapper(const NvmeOffloadOptions& options) {
  NvmeOffloadOptions nvme = options;
  nvme.buffer_numel = nvme_buffer_numel(nvme.sub_group_size);
  swapper_ =
      std::make_shared<TensorSwapper>(nvme, "optimizer-rank" + std::to_string(group_->rank()));
}

void ZeroOptimizer::start_swapping() {
  TS_CHECK(!optimizer_->takes_data_parallel_transport(),
           "offload_optimizer.device \"nvme\": ", optimizer_->name(),
           " updates outside the fused optimizer step the swapper stages; use Adam, AdamW, "
           "Lamb or SGD, or offload to \"cpu\"");
  if (swap_masters_) {
    // (ZeRO-3's shards were filled from the masters as they were made.)
    if (options_.stage < 3) publish_masters_from_memory();
    optimizer_->set_state_stager(grad_stager(std::make_shared<MasterStager>(*this, swapper_)));
  } else {
    optimizer_->set_state_stager(grad_stager(swapper_));
  }
  if (!options_.nvme->fast_init) optimizer_->initialize_state();
  swap_out_state();  // (the masters leave memory whatever fast_init says)
}

void ZeroOptimizer::publish_masters_from_memory() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor to = published_view(i);
    to.copy_(master_views_[i].to(to.device()));
    if (options_.stage == 3) shard_written(i);
    // (A swapped master read in for this goes again: its copy on disk is the same.)
    swapper_->discard({{params_[i].first, master_views_[i]}});
  }
}

Tensor ZeroOptimizer::published_view(size_t param) {
  const ShardLayout::Entry& e = entry(param);
  if (options_.stage == 3) {
    Tensor shard = shard_views_[param];
    shard.storage()->make_resident();  // (a swapped shard is overwritten whole: not read in)
    return shard;
  }
  return parts_[place_[param].first].published.narrow(0, e.offset, e.shard);
}

int64_t ZeroOptimizer::nvme_buffer_numel(int64_t sub_group_size) const {
  int64_t largest = 1, partition = 0;
  for (const Partition& part : parts_) {
    partition += part.layout.partition_numel;
    for (const auto& e : part.layout.entries) largest = std::max(largest, e.shard);
  }
  return std::max(largest, std::min(sub_group_size, partition));
}

void ZeroOptimizer::swap_out_state() {
  if (!swapper_) return;
  std::map<std::string, Tensor> state = optimizer_->state_dict();
  if (swap_masters_)
    for (size_t i = 0; i < params_.size(); ++i) state[params_[i].first] = master_views_[i];
  swapper_->swap_out(state);
}

}  // namespace tessera::parallel
