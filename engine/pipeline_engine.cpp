#include "tessera/engine/pipeline_engine.h"

#include "tessera/autograd/backward.h"
#include "tessera/error.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::engine {

using parallel::PipeInstruction;
using parallel::PipeValue;

namespace {

constexpr int kActivationTag = 7001, kGradTag = 7002;

bool needs_grad(const Tensor& t) {
  return is_floating(t.dtype());
}

}  // namespace

struct PipelineEngine::Buffers {
  std::vector<PipeValue> inputs, outputs, grads, labels;
  explicit Buffers(int64_t n)
      : inputs(static_cast<size_t>(n)),
        outputs(static_cast<size_t>(n)),
        grads(static_cast<size_t>(n)),
        labels(static_cast<size_t>(n)) {}
};

PipelineEngine::PipelineEngine(parallel::PipelineModule& module,
                               std::shared_ptr<parallel::ProcessGroup> pipe,
                               std::unique_ptr<optim::Optimizer> optimizer,
                               PipelineEngineOptions options)
    : module_(module),
      pipe_(std::move(pipe)),
      optimizer_(std::move(optimizer)),
      options_(std::move(options)) {
  TS_CHECK(pipe_ && pipe_->size() == module_.num_stages() && pipe_->rank() == module_.stage_id(),
           "PipelineEngine: the pipeline group's rank and size must be the module's stage and "
           "stage count (",
           module_.stage_id(), " of ", module_.num_stages(), ")");
  auto world = parallel::world();
  std::vector<std::vector<int>> pipelines;  // world ranks of each pipeline's stages
  if (options_.topology) {
    const auto& topo = *options_.topology;
    TS_CHECK(topo.world_size() == world->size() && topo.dim("pipe") == pipe_->size(),
             "PipelineEngine: the topology (", topo.world_size(), " ranks, pipe ", topo.dim("pipe"),
             ") does not match the job (", world->size(), " ranks) and the pipeline (",
             pipe_->size(), " stages)");
    data_parallel_ = topo.group_for(*world, "data");
    pipelines = topo.axis_groups("pipe");
  } else {
    TS_CHECK(pipe_->size() == world->size(), "PipelineEngine: a pipeline of ", pipe_->size(),
             " stages in a job of ", world->size(),
             " ranks: give options.topology ({\"pipe\", \"data\"}) for pipelines side by side");
    std::vector<int> all(static_cast<size_t>(world->size()));
    for (int r = 0; r < world->size(); ++r) all[static_cast<size_t>(r)] = r;
    pipelines = {all};
  }
  TS_CHECK(options_.micro_batches >= 1, "PipelineEngine: micro_batches must be >= 1, got ",
           options_.micro_batches);
  TS_CHECK(options_.schedule == "1f1b", "PipelineEngine: schedule '", options_.schedule,
           "' is not built yet (1f1b)");
  TS_CHECK(optimizer_, "PipelineEngine: no optimizer");
  // One group per tied key held by several stages, in every pipeline (every rank of the job
  // takes part in building each, in the same order).
  for (const auto& [key, stages] : module_.tied_stages()) {
    if (stages.size() < 2) continue;
    for (const std::vector<int>& line : pipelines) {
      std::vector<int> ranks;
      for (int64_t s : stages) ranks.push_back(line.at(static_cast<size_t>(s)));
      if (auto g = world->new_group(ranks)) tied_groups_[key] = g;
    }
    auto it = tied_groups_.find(key);
    if (it == tied_groups_.end()) continue;
    // Each stage built its copy itself: all start from the first stage's (DeepSpeed's
    // _synchronize_tied_weights).
    NoGradGuard no_grad;
    for (Tensor* t : module_.tied_parameters(key)) it->second->broadcast_async(*t, 0).wait();
  }
  module_.zero_grad();
}

PipelineEngine::~PipelineEngine() = default;

void PipelineEngine::forward() {
  fail(
      "PipelineEngine: use train_batch() or eval_batch(): a pipeline runs the forward and "
      "backward passes of all its micro-batches itself (as DeepSpeed's does)");
}
void PipelineEngine::backward() {
  forward();
}
void PipelineEngine::step() {
  forward();
}

double PipelineEngine::train_batch(const PipeDataIterator& data) {
  TS_CHECK(data, "PipelineEngine::train_batch: no data iterator (set_dataiterator)");
  module_.train();
  parallel::TrainSchedule schedule(options_.micro_batches, module_.num_stages(),
                                   module_.stage_id());
  return run(schedule.steps(), data, true);
}

double PipelineEngine::eval_batch(const PipeDataIterator& data) {
  TS_CHECK(data, "PipelineEngine::eval_batch: no data iterator");
  module_.eval();
  parallel::InferenceSchedule schedule(options_.micro_batches, module_.num_stages(),
                                       module_.stage_id());
  NoGradGuard no_grad;
  const double loss = run(schedule.steps(), data, false);
  module_.train();
  return loss;
}

double PipelineEngine::run(const std::vector<parallel::PipeStep>& steps,
                           const PipeDataIterator& data, bool train) {
  Buffers b(std::max<int64_t>(2, options_.micro_batches));
  loss_sum_ = 0;
  for (const parallel::PipeStep& step : steps)
    for (const PipeInstruction& in : step) execute(in, b, data, train);
  // The last stage's mean loss, on every stage.
  Tensor loss = scalar_tensor(loss_sum_ / static_cast<double>(options_.micro_batches),
                              DType::Float64, Device::cpu());
  pipe_->broadcast_async(loss, static_cast<int>(module_.num_stages() - 1)).wait();
  if (data_parallel_ && data_parallel_->size() > 1)
    return data_parallel_->all_reduce_scalar(loss.item()) /
           static_cast<double>(data_parallel_->size());
  return loss.item();
}

void PipelineEngine::execute(const PipeInstruction& in, Buffers& b, const PipeDataIterator& data,
                             bool train) {
  const auto buf = static_cast<size_t>(in.buffer_id);
  const int stage = static_cast<int>(module_.stage_id());
  switch (in.kind) {
    case PipeInstruction::LoadMicroBatch: {
      PipeMicroBatch mb = data();
      if (is_first_stage()) b.inputs[buf] = std::move(mb.inputs);
      if (is_last_stage()) b.labels[buf] = std::move(mb.labels);
      break;
    }
    case PipeInstruction::ForwardPass: {
      PipeValue x = b.inputs[buf];
      if (train && !is_first_stage())
        for (Tensor& t : x)
          if (needs_grad(t)) t = t.detach().requires_grad_(true);
      b.inputs[buf] = x;
      PipeValue y = module_.forward(x);
      if (is_last_stage()) {
        const Tensor loss = module_.loss(y, b.labels[buf]);
        loss_sum_ += loss.item();
        y = {loss};
      }
      b.outputs[buf] = std::move(y);
      break;
    }
    case PipeInstruction::SendActivation:
      send(b.outputs[buf], stage + 1, true);
      if (!train) b.outputs[buf].clear();
      break;
    case PipeInstruction::RecvActivation:
      b.inputs[buf] = recv(stage - 1, true);
      break;
    case PipeInstruction::RecvGrad:
      b.grads[buf] = recv(stage + 1, false);
      break;
    case PipeInstruction::BackwardPass: {
      // The micro-batch's share of the mean: loss / micro_batches.
      if (is_last_stage()) {
        autograd::backward(
            {b.outputs[buf][0] * (1.0 / static_cast<double>(options_.micro_batches))}, {});
      } else {
        std::vector<Tensor> roots;
        for (const Tensor& t : b.outputs[buf])
          if (needs_grad(t)) roots.push_back(t);
        autograd::backward(roots, b.grads[buf]);
      }
      b.outputs[buf].clear();
      b.grads[buf].clear();
      b.labels[buf].clear();
      break;
    }
    case PipeInstruction::SendGrad: {
      PipeValue g;
      for (const Tensor& t : b.inputs[buf])
        if (needs_grad(t)) g.push_back(t.grad().defined() ? t.grad() : zeros_like(t));
      send(g, stage - 1, false);
      b.inputs[buf].clear();
      break;
    }
    case PipeInstruction::ReduceTiedGrads:
      reduce_tied_grads();
      break;
    case PipeInstruction::ReduceGrads:
      reduce_grads();
      break;
    case PipeInstruction::OptimizerStep:
      optimizer_->step();
      module_.zero_grad();
      break;
    default:
      fail("PipelineEngine: instruction ", in.str(), " is not supported yet");
  }
}

// The first message in each direction describes the tensors: [count, then per tensor dtype,
// rank, dims...]; gradients go back in the shapes of the floating activations.
void PipelineEngine::send(const PipeValue& value, int peer, bool activation) {
  const int tag = activation ? kActivationTag : kGradTag;
  if (activation && !sent_.known) {
    std::vector<int64_t> meta{static_cast<int64_t>(value.size())};
    for (const Tensor& t : value) {
      meta.push_back(static_cast<int64_t>(t.dtype()));
      meta.push_back(t.dim());
      for (int64_t d : t.shape()) meta.push_back(d);
      sent_.dtypes.push_back(t.dtype());
      sent_.shapes.push_back(t.shape());
    }
    Tensor length = scalar_tensor(static_cast<double>(meta.size()), DType::Int64, Device::cpu());
    pipe_->send_async(length.reshape({1}), peer, tag).wait();
    pipe_->send_async(from_vector(meta, {static_cast<int64_t>(meta.size())}), peer, tag).wait();
    sent_.known = true;
  }
  // (Every batch must have the first batch's shapes: DeepSpeed caches them likewise.)
  for (const Tensor& t : value) pipe_->send_async(t.contiguous(), peer, tag).wait();
}

PipeValue PipelineEngine::recv(int peer, bool activation) {
  const int tag = activation ? kActivationTag : kGradTag;
  if (activation && !received_.known) {
    Tensor length = zeros({1}, DType::Int64, Device::cpu());
    pipe_->recv_async(length, peer, tag).wait();
    Tensor meta = zeros({static_cast<int64_t>(length.item())}, DType::Int64, Device::cpu());
    pipe_->recv_async(meta, peer, tag).wait();
    const int64_t* v = meta.data<int64_t>();
    size_t at = 1;
    for (int64_t i = 0; i < v[0]; ++i) {
      received_.dtypes.push_back(static_cast<DType>(v[at++]));
      const int64_t rank = v[at++];
      received_.shapes.emplace_back(v + at, v + at + rank);
      at += static_cast<size_t>(rank);
    }
    received_.known = true;
  }
  // Activations arrive as the previous stage sent them; gradients as this stage sent its
  // floating outputs.
  const Meta& m = activation ? received_ : sent_;
  PipeValue out;
  for (size_t i = 0; i < m.shapes.size(); ++i) {
    if (!activation && !is_floating(m.dtypes[i])) continue;
    Tensor t = Tensor::empty(m.shapes[i], m.dtypes[i], Device::cpu());
    pipe_->recv_async(t, peer, tag).wait();
    out.push_back(t);
  }
  return out;
}

void PipelineEngine::reduce_tied_grads() {
  for (auto& [key, group] : tied_groups_)
    for (Tensor* p : module_.tied_parameters(key)) {
      if (!p->grad().defined()) p->set_grad(zeros_like(*p));
      group->all_reduce_async(p->grad()).wait();
    }
}

// The mean gradient over this stage's data-parallel replicas.
void PipelineEngine::reduce_grads() {
  if (!data_parallel_ || data_parallel_->size() == 1) return;
  const double scale = 1.0 / static_cast<double>(data_parallel_->size());
  NoGradGuard no_grad;
  for (auto& [name, p] : module_.named_parameters()) {
    if (!p->grad().defined()) p->set_grad(zeros_like(*p));
    data_parallel_->all_reduce_async(p->grad()).wait();
    p->grad().mul_(scale);
  }
}

}  // namespace tessera::engine
