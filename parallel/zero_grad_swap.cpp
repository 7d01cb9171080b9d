// ZeRO-Infinity's gradient partition in the swap file (offload_optimizer {"device": "nvme"} on
// CPU ranks, stages 2-3), as DeepSpeed swaps its partitioned gradients with the optimizer
// state: between reductions a rank holds none of it. Each bucket's reduced shard is added into
// its parameters' gradient tensors, which go back to the file; the norm reads each once; the
// update reads each with its sub-group's state and applies the scaling there, in the order the
// in-memory path applies it (so the results are the same bits).
#include <algorithm>
#include <cmath>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/zero_optimizer.h"

namespace tessera::parallel {

void ZeroOptimizer::accumulate_grad(size_t p, int64_t offset, const Tensor& reduced) {
  NoGradGuard no_grad;
  const Partition& part = parts_[p];
  const auto& entries = part.layout.entries;
  // The bucket's parameters: consecutive entries, from the one starting at `offset`.
  auto it = std::lower_bound(entries.begin(), entries.end(), offset,
                             [](const ShardLayout::Entry& e, int64_t at) { return e.offset < at; });
  std::vector<optim::StateTensor> written;
  for (; it != entries.end() && it->offset < offset + reduced.numel(); ++it) {
    const size_t i = part.params[static_cast<size_t>(it - entries.begin())];
    Tensor& g = grad_shards_[i];
    if (!g.defined()) g = zeros({it->shard}, reduced.dtype(), reduced.device());
    g.add_(reduced.narrow(0, it->offset - offset, it->shard));  // (read back in if swapped)
    if (squares_scale_) grad_squares_[i] = squares_of(g, *squares_scale_);
    written.push_back(grad_entry(i));
  }
  swapper_->release(written);
}

double ZeroOptimizer::squares_of(const Tensor& g, double scale) {
  // As the in-memory path: float32, times the scale (g itself unchanged).
  Tensor f = g.dtype() != DType::Float32 ? g.to(DType::Float32) : scale != 1.0 ? g.clone() : g;
  if (scale != 1.0) f.mul_(scale);
  return optim::sum_of_squares({f});
}

GradSquares ZeroOptimizer::swapped_grad_squares(double scale) {
  swapped_grads_ready_ = true;
  swapped_grad_scale_ = scale;
  swapped_grad_coef_ = 1.0;
  // Every parameter has its gradient (a backward reduces every bucket); one never reduced
  // (no backward since zero_grad) is zeros, as the in-memory partition would be.
  std::vector<size_t> order;  // (parameters, in layout order)
  for (const Partition& part : parts_)
    for (size_t k = 0; k < part.params.size(); ++k) {
      const size_t i = part.params[k];
      if (!grad_shards_[i].defined()) {
        grad_shards_[i] = zeros({part.layout.entries[k].shard}, options_.comm_dtype, device_);
        swapper_->release({grad_entry(i)});
      }
      order.push_back(i);
    }
  // The optimizer's parameters take their gradient tensors (read in, scaled, by GradStager).
  for (auto& g : optimizer_->groups())
    for (size_t k = 0; k < g.params.size(); ++k)
      g.params[k].set_grad(grad_shards_[index_.at(g.names[k])]);
  // Squares per parameter, in double: those taken as the gradients were reduced at this
  // scale, else each read in once (the next read ahead) and dropped.
  const bool taken = squares_scale_ == scale;
  GradSquares s;
  double expert = 0.0;
  for (size_t n = 0; n < order.size(); ++n) {
    const size_t i = order[n];
    double sq = grad_squares_[i];
    if (!taken || std::isnan(sq)) {
      if (n + 1 < order.size()) swapper_->prefetch({grad_entry(order[n + 1])});
      swapper_->acquire({grad_entry(i)});
      sq = squares_of(grad_shards_[i], scale);  // (unchanged: its copy on disk stays valid)
      swapper_->discard({grad_entry(i)});
    }
    if (place_[i].first == 1)
      expert += sq;
    else if (options_.tensor_parallel_group &&
             options_.tensor_parallel_params.count(params_[i].first))
      s.tensor_parallel += sq;
    else
      s.replicated += sq;
  }
  if (parts_.size() > 1) s.expert = parts_[1].group->all_reduce_scalar(expert);
  return s;
}

// Wraps the optimizer's stager: each sub-group's gradients are read in with its state (and
// parameters), scaled, and dropped after its update.
class ZeroOptimizer::GradStager : public optim::StateStager {
 public:
  GradStager(ZeroOptimizer& zero, std::shared_ptr<optim::StateStager> inner)
      : zero_(zero), inner_(std::move(inner)) {}
  int64_t sub_group_size() const override { return inner_->sub_group_size(); }
  bool stages_params() const override { return true; }  // (to know the sub-group's parameters)
  bool prefetch(const std::vector<optim::StateTensor>& state) override {
    // (Between steps, the next step's: its gradients do not exist yet.)
    return inner_->prefetch(for_inner(state)) &&
           (!zero_.swapped_grads_ready_ || zero_.swapper_->prefetch(grads_of(state)));
  }
  void acquire(const std::vector<optim::StateTensor>& state) override {
    NoGradGuard no_grad;
    inner_->acquire(for_inner(state));
    zero_.swapper_->acquire(grads_of(state));
    const double scale = zero_.swapped_grad_scale_, coef = zero_.swapped_grad_coef_;
    for (size_t i : params_with_grads(state)) {
      // As prepare_master_grads and scale_master_grads do in memory: float32, times the
      // scale, then times the clipping coefficient.
      const Tensor& g = zero_.grad_shards_[i];
      Tensor master = g.dtype() == DType::Float32 ? g : g.to(DType::Float32);
      if (scale != 1.0) master.mul_(scale);
      if (coef < 1.0) master.mul_(coef);
      zero_.master_views_[i].set_grad(master);
    }
  }
  void release(const std::vector<optim::StateTensor>& state) override {
    inner_->release(for_inner(state));
    // Used: dropped (its file region is written anew by the next reduction).
    for (size_t i : params_with_grads(state))
      zero_.master_views_[i].set_grad(zero_.grad_shards_[i]);
    zero_.swapper_->discard(grads_of(state));
  }
  void finish() override {
    inner_->finish();
    zero_.swapped_grads_ready_ = false;  // (used: the next ones come with the next reduction)
  }

 private:
  // The parameters' entries go on only where the inner stager stages parameters.
  std::vector<optim::StateTensor> for_inner(const std::vector<optim::StateTensor>& state) const {
    if (inner_->stages_params()) return state;
    std::vector<optim::StateTensor> out;
    for (const optim::StateTensor& s : state)
      if (!zero_.index_.count(s.key)) out.push_back(s);
    return out;
  }
  // The sub-group's parameters (its entries keyed by their names) that have gradients.
  std::vector<size_t> params_with_grads(const std::vector<optim::StateTensor>& state) const {
    std::vector<size_t> out;
    for (const optim::StateTensor& s : state) {
      const auto it = zero_.index_.find(s.key);
      if (it != zero_.index_.end() && zero_.grad_shards_[it->second].defined())
        out.push_back(it->second);
    }
    return out;
  }
  std::vector<optim::StateTensor> grads_of(const std::vector<optim::StateTensor>& state) const {
    std::vector<optim::StateTensor> out;
    for (size_t i : params_with_grads(state)) out.push_back(zero_.grad_entry(i));
    return out;
  }
  ZeroOptimizer& zero_;
  std::shared_ptr<optim::StateStager> inner_;
};

std::shared_ptr<optim::StateStager> ZeroOptimizer::grad_stager(
    std::shared_ptr<optim::StateStager> inner) {
  if (!swap_grads_) return inner;
  return std::make_shared<GradStager>(*this, std::move(inner));
}

}  // namespace tessera::parallel
