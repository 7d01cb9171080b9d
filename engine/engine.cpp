#include "tessera/engine/engine.h"
#include "tessera/engine/data_efficiency_config.h"
#include "tessera/engine/progressive_layer_drop_config.h"
#include "tessera/parallel/zero_config.h"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>

#include "tessera/autograd/backward.h"
#include "tessera/autograd/function.h"
#include "tessera/cuda.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/grad_norm.h"
#include "tessera/parallel/thread_share.h"
#include "tessera/rng.h"

namespace tessera::engine {

Engine::Engine(nn::Module& model, io::TrainConfig config,
               std::shared_ptr<parallel::ProcessGroup> group)
    : Engine(model, std::move(config), InitializeOptions{.group = std::move(group)}) {}

Engine::Engine(nn::Module& model, io::TrainConfig config, InitializeOptions options)
    : model_(model),
      config_(std::move(config)),
      group_(options.group ? options.group : parallel::world()) {
  const int64_t world = group_->size();
  TS_CHECK(config_.train_batch_size ==
               config_.micro_batch_size * config_.gradient_accumulation_steps * world,
           "engine: train_batch_size ", config_.train_batch_size, " != micro batch ",
           config_.micro_batch_size, " * gradient_accumulation_steps ",
           config_.gradient_accumulation_steps, " * ", world,
           " ranks (parse the config with this job's world size)");
  TS_CHECK(!(options.optimizer && options.optimizer_factory),
           "initialize: pass a client optimizer object or a factory, not both");
  TS_CHECK(!(options.optimizer && !options.model_parameters.empty()),
           "initialize: with a client optimizer object its own groups are the parameter groups; "
           "model_parameters goes with the config's optimizer or a factory");
  const bool client_optimizer = options.optimizer || options.optimizer_factory;
  checkpoint_files_ = std::move(options.checkpoint_files);
  // (Before anything that reports. A pipeline stage may hold only replicated layers.)
  const bool pipeline = options.pipeline_group && options.pipeline_group->size() > 1;
  setup_tensor_parallel(options.tensor_parallel_group, pipeline);
  if (pipeline) {
    pipe_group_ = options.pipeline_group;
    TS_CHECK(parallel::zero_config(config_).stage <= 2,
             "engine: zero_optimization.stage 3 with pipeline "
             "parallelism: each stage would gather its parameters again for every micro-batch's "
             "forward and backward (2 x gradient_accumulation_steps gathers per step); use "
             "stage 1 or 2, which partition the optimizer state and gradients of each stage");
  }
  if (client_optimizer && config_.optimizer.present && is_lead())
    std::cerr << "warning: initialize: the client optimizer replaces the config's \"optimizer\" "
                 "section (as in DeepSpeed)\n";
  if (options.lr_scheduler && !config_.scheduler.type.empty() && is_lead())
    std::cerr << "warning: initialize: the client lr_scheduler replaces the config's "
                 "\"scheduler\" section (as in DeepSpeed)\n";
  // Every group this engine waits on ends a stuck wait within distributed.timeout_s.
  for (parallel::ProcessGroup* g : {group_.get(), tp_group_.get(), pipe_group_.get()})
    if (g) g->set_timeout(config_.distributed.timeout());
  monitor_ = std::make_unique<MonitorMaster>(config_, is_lead() ? 0 : 1);
  compute_dtype_ = config_.model_dtype();
  // (A pipeline stage may hold only copies of tied layers: no parameters of its own.)
  TS_CHECK(!model_.named_parameters().empty() || pipe_group_,
           "engine: the model has no parameters");
  const Device device = this->device();
  timers_ = EngineTimers(config_.wall_clock_breakdown,
                         device.is_cuda() ? std::function<void()>(cuda_synchronize) : nullptr);
  if (config_.flops_profiler.enabled && is_lead())
    flops_profiler_ = std::make_unique<nn::FlopsProfiler>(model_);
  build_training_schedules();
  // CUDA tensors communicate over NCCL (bootstrapped over the MPI world); CPU ones over MPI.
  // (TESSERA_DIST_BACKEND=nccl uses NCCL on one rank too: a single GPU can test it.)
  const char* backend = std::getenv("TESSERA_DIST_BACKEND");
  const bool want_nccl = world > 1 || (backend && std::string(backend) == "nccl");
  if (device.is_cuda() && want_nccl && group_->backend() != "nccl")
    group_ = parallel::make_nccl_group(group_, device);
  for (parallel::ProcessGroup* g : {group_.get(), tp_group_.get(), pipe_group_.get()})
    if (g)
      g->logger().enable(config_.comms_logger.enabled, config_.comms_logger.verbose,
                         config_.comms_logger.prof_all ? std::vector<std::string>{}
                                                       : config_.comms_logger.prof_ops);
  if (config_.trace.enabled) start_trace();
  // Dropout masks as one process would draw them for the global batch (see rng.h).
  set_data_parallel_shard(group_->rank(), static_cast<int>(world));
  setup_experts();
  setup_fp8();  // (after setup_experts: experts' FP8 layers reduce over their replicas)
  if (world > 1) broadcast_initial_parameters();
  std::vector<optim::ParamGroup> groups = resolve_groups(options);
  const double optimizer_lr = groups.empty() ? config_.optimizer.lr() : groups.front().lr;
  if (parallel::zero_config(config_).stage > 0) {
    optim::OptimizerFactory make = options.optimizer_factory;
    if (options.optimizer) {
      std::shared_ptr<optim::Optimizer> prototype = std::move(options.optimizer);
      make = [prototype](std::vector<optim::ParamGroup> g) { return prototype->rebuild(g); };
    }
    if (!make)
      make = [this](std::vector<optim::ParamGroup> g) {
        return make_optimizer(config_, std::move(g));
      };
    setup_parallel(std::move(groups), make);
  } else {
    build_optimizer(options, std::move(groups));
    if (world > 1) setup_parallel({}, {});
  }
  if (options.lr_scheduler)
    schedule_ = std::move(options.lr_scheduler);
  else if (!config_.scheduler.type.empty())
    schedule_ = make_schedule(config_, optimizer_lr);
  if (config_.fp16.enabled) {
    const bool dynamic = config_.fp16.loss_scale == 0.0;
    scaler_ = LossScaler(
        dynamic,
        dynamic ? std::pow(2.0, config_.fp16.initial_scale_power) : config_.fp16.loss_scale,
        config_.fp16.loss_scale_window, config_.fp16.hysteresis,
        config_.fp16.consecutive_hysteresis, config_.fp16.min_loss_scale,
        // DeepSpeed: ZeRO's DynamicLossScaler, or FP16_Optimizer's rule without ZeRO.
        parallel::zero_config(config_).stage > 0 ? LossScaleRule::ZeroDynamic
                                                 : LossScaleRule::FusedOptimizer);
  }
  model_.train();
}

void Engine::begin_forward() {
  if (zero_) zero_->set_evaluating(!model_.is_training());
  const int64_t micro = micro_steps_ % config_.gradient_accumulation_steps;
  if (layer_drop_ && model_.is_training()) layer_drop_->begin_forward(global_steps_, micro);
  if (token_drop_ && model_.is_training()) token_drop_->begin_forward(global_steps_, micro);
  if (trace_ && !trace_->recording() && trace_->wants(global_steps_) && model_.is_training()) {
    trace_->begin_step(global_steps_);
    update_forced_timers();
  }
}

Device Engine::device() {
  const auto named = model_.named_parameters();
  return named.empty() ? Device::cpu() : named.front().second->device();
}

void Engine::fail_not_loss_model(const std::type_info& batch) const {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(batch.name(), nullptr, nullptr, &status), std::free);
  fail("engine.forward: the model (", model_.type_name(), ") does not implement nn::LossModel<",
       status == 0 && name ? name.get() : batch.name(),
       ">; derive it from that (nn/loss_model.h), or call your model yourself and pass its "
       "loss to backward");
}

Tensor Engine::scaled(const Tensor& loss, double factor) {
  return loss * factor;
}

double Engine::loss_weight(int64_t terms) {
  const int world = group_->size();
  if (world == 1) return 0.0;
  const double all = group_->all_reduce_scalar(static_cast<double>(terms));
  // Equal shares (GPT's): each rank's mean already averages to the global one.
  if (all == 0 || static_cast<double>(terms) * world == all) return 0.0;
  return world / all;
}

bool Engine::is_gradient_accumulation_boundary() const {
  if (boundary_override_) return *boundary_override_;
  return (micro_steps_ + 1) % config_.gradient_accumulation_steps == 0;
}

void Engine::count_backward(const char* what) {
  note_moe_forward();  // (every backward passes here, after its forward)
  // A loop written as "gas backwards, then one step()" would accumulate twice the window.
  if (backwards_since_step_++ == 1 && !boundary_override_ && !warned_backward_twice_ && is_lead()) {
    warned_backward_twice_ = true;
    std::cerr << "warning: " << what << ": a second backward before step() (micro-step "
              << micro_steps_ << "): its gradients add to the same micro-batch. As in "
              << "DeepSpeed, call step() after every micro-batch's backward (it updates at the "
              << "accumulation boundary), or use set_gradient_accumulation_boundary\n";
  }
}

void Engine::begin_reduction(bool allreduce) {
  // (An optimizer past 1-bit Adam's freeze reads each rank's own gradients.)
  const bool boundary = is_gradient_accumulation_boundary() && allreduce &&
                        !(optimizer_ && optimizer_->reads_local_gradients());
  // (At the boundary the gradients this backward reduces are final: swapped ones take their
  // squares for the norm as they are reduced, at the scale step() will apply.)
  if (zero_)
    zero_->begin_backward(
        boundary || zero_->stage() >= 2,
        boundary ? std::optional<double>(post_scale_ / scaler_.scale()) : std::nullopt);
  if (dp_buckets_) dp_buckets_->begin_backward(boundary);
  if (expert_buckets_) expert_buckets_->begin_backward(boundary);
  zero_unused_grads_ = boundary && !zero_ && !dp_buckets_ && !pipe_group_;
}

void Engine::end_reduction() {
  if (zero_) zero_->end_backward();
  if (dp_buckets_) dp_buckets_->end_backward();
  if (expert_buckets_) expert_buckets_->end_backward();
  if (!zero_unused_grads_) return;
  // As DeepSpeed's reduction (and Tessera's buckets and ZeRO partitions on N ranks): a
  // parameter no micro-batch used (a layer progressive layer drop skipped) steps with a zero
  // gradient, so one process steps exactly as N ranks do.
  zero_unused_grads_ = false;
  NoGradGuard no_grad;
  for (auto& [name, p] : model_.named_parameters())
    if (p->requires_grad() && !p->grad().defined()) p->set_grad(zeros_like(*p));
}

Tensor Engine::backward(const Tensor& loss, const BackwardOptions& options) {
  TS_CHECK(loss.numel() == 1, "engine.backward: expected a scalar loss, got ", loss.describe());
  TS_CHECK(loss.requires_grad(), "engine.backward: the loss ", loss.describe(),
           " does not require grad (computed under NoGradGuard, or from no parameter?)");
  TS_CHECK(options.allreduce_gradients || zero_stage() < 2,
           "engine.backward: allreduce_gradients = false cannot be used with ZeRO stage ",
           zero_stage(), ", whose gradient partitions are reduced during backward");
  finish_direct_backward();
  const double gas =
      options.scale_wrt_gas ? static_cast<double>(config_.gradient_accumulation_steps) : 1.0;
  const double factor = scaler_.scale() / gas;
  count_backward("engine.backward");
  reduced_backward(options.allreduce_gradients, [&] {
    (factor == 1.0 ? loss : loss * factor).backward(Tensor(), options.retain_graph);
  });
  if (monitored()) {  // (same on every rank: the step's average is collective)
    step_loss_sum_ += loss.item();
    ++step_losses_;
  }
  NoGradGuard no_grad;
  return gas == 1.0 ? loss.detach() : loss.detach() / gas;
}

void Engine::reduced_backward_pass(const char* what, const std::function<void()>& pass) {
  finish_direct_backward();
  count_backward(what);
  reduced_backward(true, pass);
}

double Engine::loss_gradient_factor() const {
  return scaler_.scale() / static_cast<double>(config_.gradient_accumulation_steps);
}

void Engine::reduced_backward(bool allreduce, const std::function<void()>& pass) {
  const auto started = timers_.start();
  begin_reduction(allreduce);
  in_engine_backward_ = true;
  const auto inner = timers_.start();
  try {
    pass();
  } catch (...) {
    in_engine_backward_ = false;
    throw;
  }
  in_engine_backward_ = false;
  timers_.stop(EngineTimers::BackwardInner, inner);
  const auto reduce = timers_.start();
  end_reduction();
  timers_.stop(EngineTimers::BackwardAllreduce, reduce);
  timers_.stop(EngineTimers::Backward, started);
}

Tensor Engine::scale(const Tensor& loss) {
  TS_CHECK(loss.numel() == 1 && loss.requires_grad(),
           "engine.scale: expected a scalar loss that requires grad, got ", loss.describe());
  scale_expected_ = true;
  // The accumulation division goes in with the loss scale, as engine.backward applies them
  // (one factor: a float16 loss times 2^16 alone would overflow).
  const double factor = loss_gradient_factor();
  return factor == 1.0 ? loss : loss * factor;
}

Tensor Engine::track_direct_backward(const Tensor& loss) {
  std::weak_ptr<Engine*> self = self_;
  return autograd::CustomFunction::apply(
      {loss}, [](autograd::FunctionContext&, const std::vector<Tensor>& in) { return in; },
      [self](autograd::FunctionContext&, const std::vector<Tensor>& grad) {
        const auto engine = self.lock();
        TS_CHECK(engine, "loss.backward(): the engine whose forward made this loss is gone");
        Engine& e = **engine;
        // engine.backward and scale() have applied the factor already.
        if (e.in_engine_backward_) return grad;
        const bool scaled = e.begin_direct_backward();
        const double gas = static_cast<double>(e.config_.gradient_accumulation_steps);
        return scaled || gas == 1.0 ? grad : std::vector<Tensor>{grad[0] / gas};
      },
      "engine_loss")[0];
}

bool Engine::begin_direct_backward() {
  TS_CHECK(!config_.fp16.enabled || scale_expected_,
           "loss.backward(): fp16 training needs the loss scaled: call "
           "engine.scale(loss).backward(), or engine.backward(loss)");
  const bool scaled = scale_expected_;
  scale_expected_ = false;
  finish_direct_backward();
  count_backward("loss.backward()");
  begin_reduction(true);
  direct_backward_pending_ = true;
  return scaled;
}

void Engine::finish_direct_backward() {
  if (!direct_backward_pending_) return;
  direct_backward_pending_ = false;
  end_reduction();
}

void Engine::zero_grad() {
  NoGradGuard no_grad;
  if (zero_)
    zero_->zero_grad();
  else
    optimizer_->zero_grad();
  model_.zero_grad();
}

double Engine::lr() const {
  if (schedule_) return schedule_->lr(schedule_step_);
  const optim::Optimizer& opt = zero_ ? zero_->optimizer() : *optimizer_;
  return opt.lr();
}

std::vector<double> Engine::get_lr() const {
  // A schedule sets every group's lr (DeepSpeed's schedules do); without one each keeps its own.
  const optim::Optimizer& opt = zero_ ? zero_->optimizer() : *optimizer_;
  std::vector<double> out;
  for (const auto& g : opt.groups()) out.push_back(schedule_ ? lr() : g.lr);
  return out;
}

std::vector<Tensor> Engine::master_params() {
  std::vector<Tensor> out;
  for (auto& g : optimizer().groups())
    for (auto& p : g.params) out.push_back(p);
  return out;
}

void Engine::sync_master_to_model() {
  NoGradGuard no_grad;
  for (auto& [slot, master] : master_) slot->copy_(master);
}

double Engine::clip_factor(StepStats& st, double grad_norm) {
  st.grad_norm = grad_norm;
  global_grad_norm_ = grad_norm;
  st.overflow = !std::isfinite(grad_norm);
  if (st.overflow || config_.gradient_clipping <= 0) return 1.0;
  return optim::clip_coefficient(grad_norm, config_.gradient_clipping);
}

StepStats Engine::step(const LrKwargs& lr_kwargs) {
  const auto started = timers_.start();
  finish_direct_backward();
  scale_expected_ = false;
  StepStats st;
  st.lr = lr();
  st.loss_scale = scaler_.scale();
  const bool boundary = is_gradient_accumulation_boundary();
  ++micro_steps_;
  backwards_since_step_ = 0;
  if (!boundary) {
    timers_.stop(EngineTimers::Step, started);
    return st;
  }
  NoGradGuard no_grad;
  update_fp8_scales();  // (the next step's forward uses the new scales)
  global_grad_norm_.reset();
  if (zero_) {
    const auto gradients = timers_.start();
    // Partition gradients are sums over ranks (and loss-scaled): average and unscale.
    const double coef = clip_factor(
        st, parallel::global_grad_norm(zero_->prepare_master_grads(post_scale_ / scaler_.scale()),
                                       {.partition = &zero_->group(),
                                        .tensor = tp_group_.get(),
                                        .pipe = pipe_group_.get(),
                                        .expert = expert_group_.get()}));
    if (coef < 1.0) zero_->scale_master_grads(coef);
    timers_.stop(EngineTimers::OptimizerGradients, gradients);
  } else {
    // Unscaling and clipping become one factor applied inside the fused update; with
    // mixed precision the norm is taken over the model's 16-bit gradients.
    const double unscale = 1.0 / scaler_.scale();
    double coef = 1.0;
    if (config_.fp16.enabled || config_.gradient_clipping > 0) {
      std::vector<Tensor> holders;
      if (master_.empty()) {
        holders = master_params();
      } else {
        for (auto& [slot, master] : master_) holders.push_back(*slot);
      }
      double norm = global_grad_norm(holders) * unscale;
      // Local gradients (1-bit Adam after its freeze): one rank's overflow skips the step on
      // every rank, or the next compressed exchange would wait for a rank that skipped it.
      if (optimizer().reads_local_gradients() &&
          group_->all_reduce_scalar(std::isfinite(norm) ? 0.0 : 1.0, parallel::ReduceOp::Max) > 0)
        norm = std::numeric_limits<double>::infinity();
      coef = clip_factor(st, norm);
    }
    optimizer().set_grad_scale(unscale * coef);
  }
  st = apply_step(st);
  // A run started or ended beside this one re-divides the host's cores (same bits either way).
  parallel::rebalance_cores();
  // DeepSpeed's lr_scheduler.step(last_batch_iteration=k) after an update: iteration k's lr
  // is the next step's.
  if (st.stepped && lr_kwargs.last_batch_iteration) {
    TS_CHECK(*lr_kwargs.last_batch_iteration >= -1, "engine.step: lr_kwargs.last_batch_iteration ",
             *lr_kwargs.last_batch_iteration, " must be >= -1");
    schedule_step_ = *lr_kwargs.last_batch_iteration + 1;
  }
  timers_.stop(EngineTimers::Step, started);
  if (profiled_forwards_ > 0) report_flops_profile();
  if (trace_ && trace_->recording()) trace_->end_step();
  update_forced_timers();
  report_breakdowns();
  wrote_train_loss_ = false;
  std::vector<MonitorEvent> events;
  add_moe_events(events);
  if (step_losses_ > 0) {
    // As DeepSpeed's engine: the step's loss at its boundary (over the ranks, as the Trainer's).
    const double mean = step_loss_sum_ / static_cast<double>(step_losses_);
    events.push_back({"Train/Samples/train_loss",
                      group_->all_reduce_scalar(mean, parallel::ReduceOp::Avg), global_samples()});
    wrote_train_loss_ = true;
    step_loss_sum_ = 0.0;
    step_losses_ = 0;
  }
  if (monitor_->enabled()) {
    // As DeepSpeed: after the step, the next step's lr and the current loss scale.
    events.push_back({"Train/Samples/lr", get_lr()[0], global_samples()});
    if (config_.fp16.enabled)
      events.push_back({"Train/Samples/loss_scale", scaler_.scale(), global_samples()});
    add_schedule_events(events);
    monitor_->write_events(events);
  }
  return st;
}

StepStats Engine::apply_step(StepStats st) {
  if (st.overflow && !config_.fp16.enabled)
    fail("engine.step: the gradient norm is ", st.grad_norm, " at step ", global_steps_,
         " (inf/NaN gradients); lower the learning rate or check the data");
  if (st.overflow) {
    ++skipped_steps_;
    check_overflow_explained();
    // Skipping hides overflowing gradients, not broken weights: those would overflow forever.
    TS_CHECK(masters_finite(), "engine.step: global step ", global_steps_,
             ": the weights hold NaN or Inf (fp16 skips steps whose gradients overflow, but it "
             "cannot repair weights); lower the learning rate or check the data");
    try {
      scaler_.update(true);
    } catch (const Error& e) {
      fail("engine.step: global step ", global_steps_, ": ", e.what());
    }
    if (scaler_.dynamic() && scaler_.scale() <= config_.fp16.min_loss_scale && !warned_min_scale_ &&
        is_lead()) {
      warned_min_scale_ = true;
      std::cerr << "warning: engine.step: global step " << global_steps_
                << ": the fp16 loss scale is down to its minimum (fp16.min_loss_scale = "
                << config_.fp16.min_loss_scale
                << "); gradients smaller than float16's 6e-8 / scale underflow to zero. Lower "
                   "the learning rate, check the data, or train in bf16\n";
    }
  } else {
    if (schedule_) optimizer().set_lr(lr());
    if (const auto betas = schedule_ ? schedule_->betas(schedule_step_) : std::nullopt) {
      // DeepSpeed's momentum decay multiplies beta1 by (1 + decay_mom_rate * t) without a
      // bound; past 1 Adam diverges, so stop with the cause instead.
      TS_CHECK(betas->first < 1.0, "engine.step: global step ", global_steps_, ": the ",
               schedule_->name(), " schedule gives beta1 = ", betas->first,
               " (cycle_max_mom * (1 + decay_mom_rate * t) has grown past 1); lower "
               "scheduler.params.decay_mom_rate");
      optimizer().set_betas(betas->first, betas->second);
    }
    const auto update = zero_ ? timers_.start() : EngineTimers::Clock::time_point{};
    optimizer().step();
    if (zero_) timers_.stop(EngineTimers::OptimizerStep, update);
    scaler_.update(false);
    overflows_at_min_scale_ = 0;
    ++schedule_step_;
    st.stepped = true;
    if (zero_) {
      const auto gather = timers_.start();
      zero_->publish();
      timers_.stop(EngineTimers::OptimizerAllgather, gather);
    }
  }
  if (zero_)
    zero_->zero_grad();
  else
    optimizer_->zero_grad();
  model_.zero_grad();
  ++global_steps_;
  st.loss_scale = scaler_.scale();
  return st;
}

int64_t Engine::allocated_bytes() {
  return allocator_for(device().type).stats().allocated;
}

parallel::MemoryStats Engine::memory() const {
  if (zero_) return zero_->memory();
  parallel::MemoryStats m;
  auto bytes = [](const Tensor& t) { return t.defined() ? t.nbytes() : 0; };
  int64_t param_elems = 0;
  for (auto& [n, t] : model_.named_parameters()) {
    m.params += bytes(*t);
    param_elems += t->numel();
  }
  // Gradients in the model's dtype, one per parameter (DP: the flat bucket buffers).
  m.grads = dp_buckets_ ? dp_buckets_->buffer_bytes() +
                              (expert_buckets_ ? expert_buckets_->buffer_bytes() : 0)
                        : param_elems * static_cast<int64_t>(itemsize(compute_dtype_));
  for (auto& [slot, master] : master_) m.optimizer += bytes(master);
  for (auto& [k, v] : optimizer_->state_dict())
    if (k != "step") m.optimizer += bytes(v);
  return m;
}

}  // namespace tessera::engine
