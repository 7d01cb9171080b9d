#include <cmath>
#include <unordered_map>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/zero.h"

namespace tessera::parallel {

namespace {

int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.nbytes() : 0;
}

// Rank r's shard of a whole tensor: float32, zero-padded to the shard size.
Tensor shard_of(const Tensor& whole, const ShardLayout::Entry& e, int rank) {
  Tensor s = zeros({e.shard}, DType::Float32);
  const int64_t len = e.valid(rank);
  if (len > 0) s.narrow(0, 0, len).copy_(whole.reshape({-1}).narrow(0, rank * e.shard, len));
  return s;
}

}  // namespace

// Stage 3: gathers a released parameter's shards into its storage before an op runs, and
// releases the storage after. Every rank runs the same ops in the same order, so the
// gathers match across ranks.
struct ZeroOptimizer::Fetcher : StorageFetcher {
  std::shared_ptr<ProcessGroup> group;
  std::unordered_map<const Storage*, size_t> index;
  std::vector<Tensor> full;    // per partitioned parameter: [world * shard] over its storage
  std::vector<Tensor> shards;  // per partitioned parameter: this rank's shard
  bool enabled = true;
  // The most recently used parameter stays gathered until another one is used, so an op
  // that reuses it at once (the tied GPT-2 embedding: the head's forward, then its
  // backward) costs no second gather. Holds at most one extra parameter.
  Storage* last_used = nullptr;

  void fetch(Storage& s) override {
    const size_t i = index.at(&s);
    s.make_resident();
    group->all_gather(full[i], shards[i]);
  }
  void used(Storage& s) override {
    if (!enabled || last_used == &s) return;
    if (last_used) last_used->release();
    last_used = &s;
  }
};

ZeroOptimizer::ZeroOptimizer(nn::Module& model, std::shared_ptr<ProcessGroup> group,
                             ZeroOptions options, const OptimizerFactory& make_optimizer, double lr,
                             double weight_decay)
    : group_(std::move(group)), options_(options) {
  TS_CHECK(options.stage >= 1 && options.stage <= 3, "ZeRO: stage must be 1, 2 or 3, got ",
           options.stage);
  NoGradGuard no_grad;
  params_ = model.named_parameters();
  TS_CHECK(!params_.empty(), "ZeRO: the model has no parameters");
  model_dtype_ = params_[0].second->dtype();
  std::vector<std::pair<std::string, Shape>> shapes;
  for (auto& [name, t] : params_) {
    TS_CHECK(t->dtype() == model_dtype_ && t->device().type == DeviceType::CPU, "ZeRO: parameter '",
             name, "' is ", t->describe(), "; every parameter must be ", dtype_name(model_dtype_),
             " on cpu (the MPI backend)");
    shapes.emplace_back(name, t->shape());
  }
  const int world = group_->size(), rank = group_->rank();
  layout_ = ShardLayout(shapes, world);
  const int64_t P = layout_.partition_numel;

  master_ = zeros({P}, DType::Float32);
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& e = layout_.entries[i];
    master_.narrow(0, e.offset, e.shard).copy_(shard_of(*params_[i].second, e, rank));
  }
  if (options.compute_dtype != model_dtype_) {
    model.to(options.compute_dtype);
    params_ = model.named_parameters();
    model_dtype_ = options.compute_dtype;
  }

  partitioned_.assign(params_.size(), false);
  if (options.stage == 3) {
    param_shards_ = model_dtype_ == DType::Float32 ? master_ : master_.to(model_dtype_);
    fetcher_ = std::make_shared<Fetcher>();
    fetcher_->group = group_;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& e = layout_.entries[i];
      if (e.numel <= options.param_persistence_threshold) continue;
      partitioned_[i] = true;
      // The parameter becomes a view of a padded [world * shard] storage that is gathered
      // on use; autograd, hooks and the model keep the same tensor.
      Tensor padded = Tensor::empty({e.shard * world}, model_dtype_);
      Tensor param = Tensor::make_view(padded, e.shape, contiguous_strides(e.shape), 0);
      param.requires_grad_(true);
      *params_[i].second = param;
      Storage& st = *padded.storage();
      fetcher_->index[&st] = fetcher_->full.size();
      fetcher_->full.push_back(padded);
      fetcher_->shards.push_back(param_shards_.narrow(0, e.offset, e.shard));
      st.set_fetcher(fetcher_);
      st.release();
    }
  }

  grad_partition_ = zeros({P}, options.comm_dtype);
  GradBuckets::Options bo;
  bo.bucket_numel = options.reduce_bucket_size;
  bo.overlap = options.overlap_comm;
  bo.pre_scale = options.pre_scale;
  bo.comm_dtype = options.comm_dtype;
  std::vector<Tensor*> slots;
  for (auto& [n, t] : params_) slots.push_back(t);
  buckets_ = std::make_unique<GradBuckets>(group_, slots, GradBuckets::Mode::ReduceScatter, bo,
                                           &layout_, grad_partition_);

  // The optimizer updates this rank's master shards; groups as default_param_groups makes
  // them (no weight decay on vectors), decided by the full parameter's shape.
  optim::ParamGroup decay{{}, {}, lr, weight_decay}, no_decay{{}, {}, lr, 0.0};
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& e = layout_.entries[i];
    optim::ParamGroup& g = e.shape.size() >= 2 ? decay : no_decay;
    g.names.push_back(e.name);
    g.params.push_back(master_.narrow(0, e.offset, e.shard));
  }
  std::vector<optim::ParamGroup> groups;
  for (auto* g : {&decay, &no_decay})
    if (!g->params.empty()) groups.push_back(std::move(*g));
  optimizer_ = make_optimizer(std::move(groups));
}

ZeroOptimizer::~ZeroOptimizer() {
  if (!fetcher_) return;
  // Leave the model usable on its own: gather every parameter for good.
  fetcher_->enabled = false;
  NoGradGuard no_grad;
  for (auto& t : fetcher_->full) t.data_ptr();
  for (auto& t : fetcher_->full) t.storage()->set_fetcher(nullptr);
}

double ZeroOptimizer::prepare_master_grads(double scale) {
  NoGradGuard no_grad;
  if (grad_partition_.dtype() == DType::Float32 && scale == 1.0) {
    master_grads_ = grad_partition_;
  } else {
    master_grads_ = grad_partition_.to(DType::Float32);
    if (scale != 1.0) master_grads_.mul_(scale);
  }
  for (auto& g : optimizer_->groups())
    for (size_t k = 0; k < g.params.size(); ++k) {
      const Tensor& p = g.params[k];
      const int64_t off = p.offset() - master_.offset();
      g.params[k].set_grad(master_grads_.narrow(0, off, p.numel()));
    }
  const double local = norm(master_grads_).item();
  return std::sqrt(group_->all_reduce_scalar(local * local));
}

void ZeroOptimizer::scale_master_grads(double coef) {
  NoGradGuard no_grad;
  master_grads_.mul_(coef);
}

void ZeroOptimizer::publish() {
  NoGradGuard no_grad;
  const int world = group_->size();
  if (param_shards_.defined() && !param_shards_.same(master_)) param_shards_.copy_(master_);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (partitioned_[i]) continue;
    const auto& e = layout_.entries[i];
    Tensor gathered = Tensor::empty({e.shard * world}, model_dtype_);
    Tensor mine = master_.narrow(0, e.offset, e.shard);
    if (model_dtype_ != DType::Float32) mine = mine.to(model_dtype_);
    group_->all_gather(gathered, mine);
    params_[i].second->copy_(gathered.narrow(0, 0, e.numel).view(e.shape));
  }
}

void ZeroOptimizer::zero_grad() {
  NoGradGuard no_grad;
  grad_partition_.zero_();
  master_grads_ = Tensor();
  optimizer_->zero_grad();
  for (auto& [n, t] : params_) t->set_grad(Tensor());
  release_parameters();
}

void ZeroOptimizer::release_parameters() {
  if (!fetcher_) return;
  fetcher_->last_used = nullptr;
  for (auto& t : fetcher_->full) t.storage()->release();
}

MemoryStats ZeroOptimizer::memory() const {
  MemoryStats m;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!partitioned_[i]) m.params += bytes_of(*params_[i].second);
  if (param_shards_.defined() && !param_shards_.same(master_)) m.params += bytes_of(param_shards_);
  const int64_t item = static_cast<int64_t>(itemsize(model_dtype_));
  // Stage 1 keeps full gradients between boundaries (autograd's, accumulated).
  if (options_.stage == 1) m.grads += layout_.total_numel() * item;
  m.grads += bytes_of(grad_partition_);
  if (options_.stage == 3 && model_dtype_ == DType::Float32)
    m.params += bytes_of(master_);  // the shard is the master
  else
    m.optimizer += bytes_of(master_);
  for (auto& [k, v] : optimizer_->state_dict())
    if (k != "step") m.optimizer += bytes_of(v);
  m.buffers = buckets_->buffer_bytes();
  return m;
}

std::map<std::string, Tensor> ZeroOptimizer::shard_state() const {
  std::map<std::string, Tensor> out;
  for (const auto& e : layout_.entries) out[e.name] = master_.narrow(0, e.offset, e.shard);
  for (auto& [k, v] : optimizer_->state_dict())
    if (k != "step") out[k] = v;
  return out;
}

void ZeroOptimizer::load_full_state(const std::map<std::string, Tensor>& masters,
                                    const std::map<std::string, Tensor>& optimizer_state) {
  NoGradGuard no_grad;
  const int rank = group_->rank();
  std::map<std::string, const ShardLayout::Entry*> by_name;
  for (const auto& e : layout_.entries) {
    by_name[e.name] = &e;
    auto it = masters.find(e.name);
    TS_CHECK(it != masters.end(), "ZeRO checkpoint: no values for parameter '", e.name, "'");
    TS_CHECK(it->second.numel() == e.numel, "ZeRO checkpoint: '", e.name, "' has ",
             it->second.numel(), " elements, the model's parameter ", e.numel);
    master_.narrow(0, e.offset, e.shard).copy_(shard_of(it->second, e, rank));
  }
  std::map<std::string, Tensor> sharded;
  for (const auto& [k, v] : optimizer_state) {
    if (k == "step") {
      sharded[k] = v;
      continue;
    }
    const size_t dot = k.rfind('.');  // "<param>.<slot>"; slot names have no dot
    auto e = dot == std::string::npos ? by_name.end() : by_name.find(k.substr(0, dot));
    TS_CHECK(e != by_name.end(), "ZeRO checkpoint: optimizer state '", k,
             "' belongs to no parameter of this model");
    sharded[k] = shard_of(v, *e->second, rank);
  }
  optimizer_->load_state_dict(sharded);
  publish();
}

}  // namespace tessera::parallel
