#include "tessera/engine/pipeline_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tessera/error.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/pipeline_config.h"

namespace tessera::engine {

using parallel::PipeInstruction;
using parallel::PipeValue;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRngTag = 7003;

bool needs_grad(const Tensor& t) {
  return is_floating(t.dtype());
}

bool is_compute(PipeInstruction::Kind k) {
  return k == PipeInstruction::ForwardPass || k == PipeInstruction::BackwardPass ||
         k == PipeInstruction::BackwardInputPass || k == PipeInstruction::BackwardWeightPass ||
         k == PipeInstruction::OptimizerStep || k == PipeInstruction::LoadMicroBatch;
}

// The config a PipelineEngine with a client optimizer runs under: float32, no clipping, one
// sample per micro-batch (the batch triple only counts samples).
io::TrainConfig client_config(int64_t micro_batches, int64_t data_parallel) {
  io::TrainConfig c;
  c.micro_batch_size = 1;
  c.gradient_accumulation_steps = micro_batches;
  c.train_batch_size = micro_batches * data_parallel;
  c.world_size = data_parallel;
  c.steps_per_print = 1 << 30;
  c.gradient_clipping = 0;  // (the client's optimizer alone decides the update)
  return c;
}

}  // namespace

struct PipelineEngine::Buffers {
  std::vector<PipeValue> inputs, outputs, grads, labels;
  std::vector<int64_t> activation_bytes;         // what each buffer's forward left allocated
  std::vector<autograd::DeferredGrads> weights;  // ZB-H1: between the two backward halves
  explicit Buffers(int64_t n)
      : inputs(static_cast<size_t>(n)),
        outputs(static_cast<size_t>(n)),
        grads(static_cast<size_t>(n)),
        labels(static_cast<size_t>(n)),
        activation_bytes(static_cast<size_t>(n)),
        weights(static_cast<size_t>(n)) {}
};

PipelineEngine::PipelineEngine(parallel::PipelineModule& module,
                               std::shared_ptr<parallel::ProcessGroup> pipe,
                               const io::TrainConfig& config, InitializeOptions init,
                               PipelineEngineOptions options)
    : module_(module), pipe_(std::move(pipe)), options_(std::move(options)) {
  if (options_.schedule.empty()) options_.schedule = parallel::pipeline_config(config).schedule;
  if (!options_.tensor_parallel_group) options_.tensor_parallel_group = init.tensor_parallel_group;
  // The groups setup() makes (data, tied) inherit the world's timeout: a stopped stage ends
  // the job within distributed.timeout_s, naming the rank and the operation.
  parallel::world()->set_timeout(config.distributed.timeout());
  pipe_->set_timeout(config.distributed.timeout());
  setup(init.group);
  micro_batches_ = config.gradient_accumulation_steps;
  init.group = data_parallel_;
  init.tensor_parallel_group = options_.tensor_parallel_group;
  init.pipeline_group = pipe_;
  init.checkpoint_files = layer_files();
  engine_ = std::make_unique<Engine>(module_, config, std::move(init));
  module_.zero_grad();
}

PipelineEngine::PipelineEngine(parallel::PipelineModule& module,
                               std::shared_ptr<parallel::ProcessGroup> pipe,
                               std::unique_ptr<optim::Optimizer> optimizer,
                               PipelineEngineOptions options)
    : module_(module), pipe_(std::move(pipe)), options_(std::move(options)) {
  TS_CHECK(optimizer, "PipelineEngine: no optimizer");
  TS_CHECK(options_.micro_batches >= 1, "PipelineEngine: micro_batches must be >= 1, got ",
           options_.micro_batches);
  if (options_.schedule.empty()) options_.schedule = "1f1b";
  setup(nullptr);
  micro_batches_ = options_.micro_batches;
  InitializeOptions init;
  init.optimizer = std::move(optimizer);
  init.group = data_parallel_;
  init.tensor_parallel_group = options_.tensor_parallel_group;
  init.pipeline_group = pipe_;
  init.checkpoint_files = layer_files();
  engine_ = std::make_unique<Engine>(module_, client_config(micro_batches_, data_parallel_->size()),
                                     std::move(init));
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
  const int64_t p = module_.num_stages(), s = module_.stage_id();
  const auto schedule =
      parallel::train_schedule(options_.schedule, micro_batches_, p, s, module_.virtual_stages());
  rng_base_ = default_generator().state();
  rng_calibrating_ = rng_per_micro_batch_ < 0;
  if (rng_calibrating_ && module_.virtual_stages() > 1) count_chunk_draws(data);
  backwards_ = 0;
  const double loss =
      run(schedule->steps(), data, true, micro_batches_, schedule->num_pipe_buffers());
  // Where one process leaves the generator after these micro-batches.
  default_generator().set_state(
      {rng_base_.seed,
       rng_base_.offset + static_cast<uint64_t>(micro_batches_ * rng_per_micro_batch_)});
  return loss;
}

double PipelineEngine::eval_batch(const PipeDataIterator& data, int64_t num_micro_batches) {
  TS_CHECK(data, "PipelineEngine::eval_batch: no data iterator");
  TS_CHECK(num_micro_batches >= 0, "PipelineEngine::eval_batch: num_micro_batches ",
           num_micro_batches, " < 0");
  const int64_t m = num_micro_batches > 0 ? num_micro_batches : micro_batches_;
  const bool was_training = module_.is_training();
  module_.eval();
  NoGradGuard no_grad;
  double loss = 0;
  if (module_.virtual_stages() == 1) {
    parallel::InferenceSchedule schedule(m, module_.num_stages(), module_.stage_id());
    loss = run(schedule.steps(), data, false, m, schedule.num_pipe_buffers());
  } else {
    // The interleaved schedule's forwards alone (sends complete in the background, so its
    // receives are all that orders the stages).
    parallel::InterleavedSchedule schedule(m, module_.num_stages(), module_.stage_id(),
                                           module_.virtual_stages());
    std::vector<parallel::PipeStep> forwards;
    for (const parallel::PipeStep& step : schedule.steps()) {
      parallel::PipeStep kept;
      for (const PipeInstruction& in : step)
        if (in.kind == PipeInstruction::LoadMicroBatch || in.kind == PipeInstruction::ForwardPass ||
            in.kind == PipeInstruction::SendActivation ||
            in.kind == PipeInstruction::RecvActivation)
          kept.push_back(in);
      if (!kept.empty()) forwards.push_back(std::move(kept));
    }
    loss = run(forwards, data, false, m, schedule.num_pipe_buffers());
  }
  module_.train(was_training);
  return loss;
}

double PipelineEngine::bubble_fraction() const {
  if (bubbles_.empty()) return 0.0;
  std::vector<double> sorted = bubbles_;    // the median: one batch slowed by the machine is not
  std::sort(sorted.begin(), sorted.end());  // the schedule's
  return sorted[sorted.size() / 2];
}

double PipelineEngine::run(const std::vector<parallel::PipeStep>& steps,
                           const PipeDataIterator& data, bool train, int64_t micro_batches,
                           int64_t buffers) {
  Buffers b(std::max<int64_t>(buffers, 2));
  loss_sum_ = 0;
  std::vector<PipeTimelineEvent> events;
  const auto start = Clock::now();
  auto seconds = [&](Clock::time_point t) {
    return std::chrono::duration<double>(t - start).count();
  };
  // Waiting for the owners' step (the copies' refresh) is part of this batch's time.
  refresh_tied_copies();
  events.push_back({"RefreshTiedCopies", -1, 0.0, seconds(Clock::now()), false});
  if (train) engine_->begin_batch_without_forward();  // (the trace window)
  for (const parallel::PipeStep& step : steps)
    for (const PipeInstruction& in : step) {
      const auto t0 = Clock::now();
      execute(in, b, data, train);
      const auto t1 = Clock::now();
      events.push_back({in.name(), in.micro_batch, seconds(t0), seconds(t1), is_compute(in.kind)});
      engine_->trace_phase(
          in.micro_batch >= 0 ? in.name() + " " + std::to_string(in.micro_batch) : in.name(), t0,
          t1);
    }
  for (parallel::Work& w : sends_) w.wait();
  sends_.clear();
  // The last stage's mean loss, on every stage.
  Tensor loss =
      scalar_tensor(loss_sum_ / static_cast<double>(micro_batches), DType::Float64, Device::cpu());
  pipe_->broadcast_async(loss, static_cast<int>(module_.num_stages() - 1)).wait();
  if (train) {
    timeline_ = std::move(events);
    // The bubble: the share of the pipeline's forward/backward phase (from the batch's start
    // to stage 0's last backward, which comes after every other stage's) this stage spends
    // outside forward and backward passes (ZB-H1's halves included). (The optimizer step is
    // left out: the last stages' steps overlap stage 0's last backwards.)
    double last_backward = 0, passes = 0;
    for (const PipeTimelineEvent& e : timeline_)
      if (e.instruction == "ForwardPass" || e.instruction.rfind("Backward", 0) == 0) {
        passes += e.end - e.start;
        last_backward = std::max(last_backward, e.end);
      }
    Tensor phase = full({1}, last_backward, DType::Float64);
    pipe_->broadcast_async(phase, 0).wait();
    const double window = std::max(phase.data<double>()[0], last_backward);
    if (batches_++ > 0 && window > 0)  // the first batch warms up (shapes, calibration, ...)
      bubbles_.push_back(1.0 - passes / window);
  }
  if (data_parallel_->size() > 1)
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
      PipeMicroBatch mb = load(data);
      if (first_part(in.chunk)) b.inputs[buf] = std::move(mb.inputs);
      if (last_part(in.chunk)) b.labels[buf] = std::move(mb.labels);
      break;
    }
    case PipeInstruction::ForwardPass:
      forward_pass(in, b, train);
      break;
    case PipeInstruction::SendActivation:
      send(b.outputs[buf], next_stage(), true, in.chunk);
      if (!train) b.outputs[buf].clear();
      if (train && rng_calibrating_ && module_.virtual_stages() == 1) {
        // Where the next stage's draws start (its forward of micro-batch 0 runs before the
        // counts are gathered).
        pipe_->send(
            full({1}, static_cast<double>(rng_before_chunk_[0] + rng_this_stage_), DType::Int64),
            stage + 1, kRngTag);
        calibrate_rng();
      }
      break;
    case PipeInstruction::RecvActivation:
      b.inputs[buf] = recv(previous_stage(), true, in.chunk);
      if (train && rng_calibrating_ && module_.virtual_stages() == 1) {
        Tensor before = zeros({1}, DType::Int64, Device::cpu());
        pipe_->recv(before, stage - 1, kRngTag);
        rng_before_chunk_[0] = before.data<int64_t>()[0];
      }
      break;
    case PipeInstruction::RecvGrad:
      b.grads[buf] = recv(next_stage(), false, in.chunk);
      break;
    case PipeInstruction::BackwardPass:
      backward_pass(in, b);
      break;
    case PipeInstruction::BackwardInputPass:
      backward_input_pass(in, b);
      break;
    case PipeInstruction::BackwardWeightPass:
      backward_weight_pass(in, b);
      break;
    case PipeInstruction::SendGrad: {
      PipeValue g;
      for (const Tensor& t : b.inputs[buf])
        if (needs_grad(t)) g.push_back(t.grad().defined() ? t.grad() : zeros_like(t));
      send(g, previous_stage(), false, in.chunk);
      b.inputs[buf].clear();
      break;
    }
    case PipeInstruction::ReduceTiedGrads:
      break;  // the copies' gradients reached their owners before the owners' last backward
    case PipeInstruction::ReduceGrads:
      break;  // the stage's Engine has reduced them in the last micro-batch's backward
    case PipeInstruction::OptimizerStep:
      last_step_ = engine_->step();
      break;
    default:
      fail("PipelineEngine: instruction ", in.str(), " is not supported yet");
  }
}

void PipelineEngine::forward_pass(const PipeInstruction& in, Buffers& b, bool train) {
  if (train && rng_calibrating_ && is_first_stage()) rng_before_chunk_[0] = 0;
  const auto buf = static_cast<size_t>(in.buffer_id);
  PipeValue x = b.inputs[buf];
  if (train && !first_part(in.chunk))
    for (Tensor& t : x)
      if (needs_grad(t)) t = t.detach().requires_grad_(true);
  b.inputs[buf] = x;
  if (train) position_rng(in.micro_batch, in.chunk);
  // The buffer's previous micro-batch (through its backward) lets go of its output first, so
  // the bytes this forward leaves are its own whenever that output's send completed.
  b.outputs[buf].clear();
  const int64_t held = allocated_bytes();
  const uint64_t drawn_from = default_generator().state().offset;
  PipeValue y = module_.forward(x, in.chunk);
  if (train && rng_calibrating_ && in.micro_batch == 0)
    rng_this_stage_ = static_cast<int64_t>(default_generator().state().offset - drawn_from);
  if (last_part(in.chunk)) {
    const Tensor loss = module_.loss(y, b.labels[buf]);
    loss_sum_ += loss.item();
    y = {loss};
    if (train && rng_calibrating_ && in.micro_batch == 0) calibrate_rng();
  }
  b.outputs[buf] = std::move(y);
  if (!train) return;
  peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
  b.activation_bytes[buf] = allocated_bytes() - held;
  in_flight_bytes_ += b.activation_bytes[buf];
  activation_bytes_ = std::max(activation_bytes_, in_flight_bytes_);
}

int64_t PipelineEngine::allocated_bytes() {
  // (looked up once: the device is the first parameter's, found by walking the module)
  if (!allocator_) allocator_ = &allocator_for(engine_->device().type);
  return allocator_->stats().allocated;
}

// Around each pass that gives weight gradients (micro_batches x chunks a batch): the Engine
// counts micro-batches, one per `chunks` passes (its step() between them is not a boundary;
// the last one's comes at OptimizerStep), and reduces in the batch's last pass (with chunks,
// where the boundary is set explicitly); before that last pass the copies' tied gradients join
// the owner's, so that its reduction covers them; after it, a copy's go to the owner.
void PipelineEngine::weight_gradients(const std::function<void()>& pass) {
  const int64_t v = module_.virtual_stages();
  if (backwards_ > 0 && backwards_ % v == 0) engine_->step();
  ++backwards_;
  const bool last = backwards_ == micro_batches_ * v;
  if (v > 1) engine_->set_gradient_accumulation_boundary(last);
  if (last) receive_tied_grads();
  pass();
  if (last) send_tied_grads();
}

std::vector<Tensor> PipelineEngine::backward_roots(Buffers& b, size_t buf, int64_t chunk) const {
  if (last_part(chunk)) return {b.outputs[buf][0]};  // the loss
  std::vector<Tensor> roots;
  for (const Tensor& t : b.outputs[buf])
    if (needs_grad(t)) roots.push_back(t);
  return roots;
}

void PipelineEngine::backward_stage(const std::vector<Tensor>& outputs,
                                    const std::vector<Tensor>& grads) {
  TS_CHECK(outputs.size() == grads.size(), "pipeline backward: ", outputs.size(), " outputs but ",
           grads.size(), " gradients");
  engine_->reduced_backward_pass("engine.backward_stage",
                                 [&] { autograd::backward(outputs, grads); });
}

autograd::DeferredGrads PipelineEngine::backward_stage_inputs(const std::vector<Tensor>& outputs,
                                                              const std::vector<Tensor>& grads,
                                                              const std::vector<Tensor>& inputs) {
  if (!grads.empty()) {
    TS_CHECK(outputs.size() == grads.size(), "pipeline input backward: ", outputs.size(),
             " outputs but ", grads.size(), " gradients");
    return engine_->unreduced_backward_pass(
        [&] { return autograd::backward_inputs(outputs, grads, inputs); });
  }
  TS_CHECK(outputs.size() == 1 && outputs[0].numel() == 1 && outputs[0].requires_grad(),
           "pipeline input backward: without gradients, expected the scalar loss, got ",
           outputs.size(), " tensors");
  const Tensor& loss = outputs[0];
  // backward(loss)'s factor, as the gradient of the loss (the same product, rounded alike).
  const Tensor factor =
      full(loss.shape(), engine_->loss_gradient_factor(), loss.dtype(), loss.device());
  return engine_->unreduced_backward_pass(
      [&] { return autograd::backward_inputs({loss}, {factor}, inputs); });
}

void PipelineEngine::backward_pass(const PipeInstruction& in, Buffers& b) {
  const auto buf = static_cast<size_t>(in.buffer_id);
  weight_gradients([&] {
    if (last_part(in.chunk))
      engine_->backward(b.outputs[buf][0]);  // the loss / micro_batches (x the fp16 scale)
    else
      backward_stage(backward_roots(b, buf, in.chunk), b.grads[buf]);
  });
  b.outputs[buf].clear();
  b.grads[buf].clear();
  b.labels[buf].clear();
  --in_flight_;
  in_flight_bytes_ -= b.activation_bytes[buf];
}

// ZB-H1's first half: the stage input's gradient (for SendGrad); the weights' wait in
// b.weights with what they need.
void PipelineEngine::backward_input_pass(const PipeInstruction& in, Buffers& b) {
  const auto buf = static_cast<size_t>(in.buffer_id);
  std::vector<Tensor> inputs;
  for (const Tensor& t : b.inputs[buf])
    if (t.requires_grad()) inputs.push_back(t);
  b.weights[buf] = backward_stage_inputs(backward_roots(b, buf, in.chunk), b.grads[buf], inputs);
  b.outputs[buf].clear();
  b.grads[buf].clear();
  b.labels[buf].clear();
  --in_flight_;  // (1F1B's bound counts forwards not yet through this half)
}

void PipelineEngine::backward_weight_pass(const PipeInstruction& in, Buffers& b) {
  const auto buf = static_cast<size_t>(in.buffer_id);
  weight_gradients([&] {
    engine_->reduced_backward_pass("engine.backward_stage_weights", [&] { b.weights[buf].run(); });
  });
  b.weights[buf] = autograd::DeferredGrads();
  in_flight_bytes_ -= b.activation_bytes[buf];  // what the weights kept goes only now
}

PipeMicroBatch PipelineEngine::load(const PipeDataIterator& data) {
  if (loaded_first_) {
    PipeMicroBatch mb = std::move(*loaded_first_);
    loaded_first_.reset();
    return mb;
  }
  return batch_fn_ ? batch_fn_(data()) : data();
}

}  // namespace tessera::engine
