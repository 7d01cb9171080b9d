#include "tessera/engine/engine.h"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "tessera/autograd/function.h"
#include "tessera/cuda.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/rng.h"

namespace tessera::engine {

std::unique_ptr<optim::LRSchedule> make_schedule(const io::TrainConfig& c,
                                                 std::optional<double> optimizer_lr) {
  const auto& s = c.scheduler;
  auto p = [&](const char* k, double fallback) {
    auto it = s.params.find(k);
    return it == s.params.end() ? fallback : it->second;
  };
  auto n = [&](const char* k, int64_t fallback) {
    return static_cast<int64_t>(p(k, static_cast<double>(fallback)));
  };
  const auto wt = s.warmup_type == "linear" ? optim::WarmupType::Linear : optim::WarmupType::Log;
  const double lr = optimizer_lr.value_or(c.optimizer.lr);
  if (s.type.empty()) return std::make_unique<optim::ConstantLR>(lr);
  if (s.type == "WarmupLR")  // without warmup_max_lr DeepSpeed warms up to the optimizer's lr
    return std::make_unique<optim::WarmupLR>(p("warmup_min_lr", 0.0), p("warmup_max_lr", lr),
                                             n("warmup_num_steps", 1000), wt);
  if (s.type == "WarmupDecayLR")
    return std::make_unique<optim::WarmupDecayLR>(n("total_num_steps", 0), p("warmup_min_lr", 0.0),
                                                  p("warmup_max_lr", 0.001),
                                                  n("warmup_num_steps", 1000), wt);
  if (s.type == "WarmupCosineLR")
    return std::make_unique<optim::WarmupCosineLR>(
        lr, n("total_num_steps", 0), p("warmup_min_ratio", 0.0), n("warmup_num_steps", 1000),
        p("cos_min_ratio", 0.0001), wt);
  if (s.type == "OneCycle") {
    optim::OneCycleOptions o;
    o.cycle_min_lr = p("cycle_min_lr", 0.0);
    o.cycle_max_lr = p("cycle_max_lr", 0.0);
    o.decay_lr_rate = p("decay_lr_rate", 0.0);
    o.cycle_first_step_size = n("cycle_first_step_size", 2000);
    o.cycle_second_step_size = n("cycle_second_step_size", -1);
    o.cycle_first_stair_count = n("cycle_first_stair_count", 0);
    o.cycle_second_stair_count = n("cycle_second_stair_count", -1);
    o.decay_step_size = n("decay_step_size", 0);
    // Momentum is cycled for optimizers with betas (Adam, AdamW, Lamb), as in DeepSpeed; the
    // config parser warns that SGD's is not.
    o.cycle_momentum = p("cycle_momentum", 1.0) != 0 && c.optimizer.type != "SGD";
    o.cycle_min_mom = p("cycle_min_mom", 0.8);
    o.cycle_max_mom = p("cycle_max_mom", 0.9);
    o.decay_mom_rate = p("decay_mom_rate", 0.0);
    return std::make_unique<optim::OneCycle>(o);
  }
  if (s.type == "LRRangeTest")
    return std::make_unique<optim::LRRangeTest>(
        p("lr_range_test_min_lr", 1e-3), n("lr_range_test_step_size", 2000),
        p("lr_range_test_step_rate", 1.0), p("lr_range_test_staircase", 0) != 0);
  fail("scheduler type '", s.type, "' is not supported");
}

std::unique_ptr<optim::Optimizer> make_optimizer(const io::TrainConfig& c,
                                                 std::vector<optim::ParamGroup> groups) {
  const auto& o = c.optimizer;
  if (o.type == "SGD")
    return std::make_unique<optim::SGD>(std::move(groups),
                                        optim::SGDOptions{o.momentum, o.dampening, o.nesterov});
  if (o.type == "Lamb")
    return std::make_unique<optim::Lamb>(
        std::move(groups), optim::LambOptions{o.beta1, o.beta2, o.eps, o.max_coeff, o.min_coeff});
  return std::make_unique<optim::Adam>(std::move(groups),
                                       optim::AdamOptions{o.beta1, o.beta2, o.eps, o.adam_w_mode});
}

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
  if (client_optimizer && config_.optimizer.present && group_->rank() == 0)
    std::cerr << "warning: initialize: the client optimizer replaces the config's \"optimizer\" "
                 "section (as in DeepSpeed)\n";
  if (options.lr_scheduler && !config_.scheduler.type.empty() && group_->rank() == 0)
    std::cerr << "warning: initialize: the client lr_scheduler replaces the config's "
                 "\"scheduler\" section (as in DeepSpeed)\n";
  group_->set_timeout(config_.distributed.timeout());
  monitor_ = std::make_unique<MonitorMaster>(config_, group_->rank());
  if (config_.fp16.enabled) compute_dtype_ = DType::Float16;
  if (config_.bf16) compute_dtype_ = DType::BFloat16;
  TS_CHECK(!model_.named_parameters().empty(), "engine: the model has no parameters");
  const Device device = this->device();
  timers_ = EngineTimers(config_.wall_clock_breakdown,
                         device.is_cuda() ? std::function<void()>(cuda_synchronize) : nullptr);
  if (config_.flops_profiler.enabled && group_->rank() == 0)
    flops_profiler_ = std::make_unique<nn::FlopsProfiler>(model_);
  // CUDA tensors communicate over NCCL (bootstrapped over the MPI world); CPU ones over MPI.
  // (TESSERA_DIST_BACKEND=nccl uses NCCL on one rank too: a single GPU can test it.)
  const char* backend = std::getenv("TESSERA_DIST_BACKEND");
  const bool want_nccl = world > 1 || (backend && std::string(backend) == "nccl");
  if (device.is_cuda() && want_nccl && group_->backend() != "nccl")
    group_ = parallel::make_nccl_group(group_, device);
  group_->logger().enable(
      config_.comms_logger.enabled, config_.comms_logger.verbose,
      config_.comms_logger.prof_all ? std::vector<std::string>{} : config_.comms_logger.prof_ops);
  if (config_.trace.enabled) start_trace();
  // Dropout masks as one process would draw them for the global batch (see rng.h).
  set_data_parallel_shard(group_->rank(), static_cast<int>(world));
  if (world > 1) {
    // Every rank starts from rank 0's float32 parameters (as DDP does), before any master
    // copy or 16-bit cast is made from them; this start-up traffic is not counted.
    NoGradGuard no_grad;
    for (auto& [n, t] : model_.named_parameters()) {
      Tensor c = t->contiguous();
      group_->broadcast(c, 0);
      if (!c.same(*t)) t->copy_(c);
    }
    group_->logger().reset();
  }
  std::vector<optim::ParamGroup> groups = resolve_groups(options);
  const double optimizer_lr = groups.empty() ? config_.optimizer.lr : groups.front().lr;
  if (config_.zero.stage > 0) {
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
        config_.zero.stage > 0 ? LossScaleRule::ZeroDynamic : LossScaleRule::FusedOptimizer);
  }
  model_.train();
}

std::vector<optim::ParamGroup> Engine::resolve_groups(const InitializeOptions& options) {
  const auto& o = config_.optimizer;
  const auto named = model_.named_parameters();
  std::vector<optim::ParamGroup> groups;
  if (options.optimizer) {
    // The object's groups: names from the tensors (a group built from tensors alone has none).
    for (const auto& g : options.optimizer->groups()) {
      optim::ParamGroup spec{{}, {}, g.lr, g.weight_decay};
      for (const Tensor& p : g.params) {
        const auto it = std::find_if(named.begin(), named.end(),
                                     [&](const auto& e) { return e.second->same(p); });
        TS_CHECK(it != named.end(), "initialize: the client optimizer's group ", groups.size(),
                 " holds ", p.describe(), ", which is not a parameter of the model");
        spec.names.push_back(it->first);
      }
      groups.push_back(std::move(spec));
    }
  } else if (!options.model_parameters.empty()) {
    for (const auto& g : options.model_parameters)
      groups.push_back({g.names, {}, g.lr.value_or(o.lr), g.weight_decay.value_or(o.weight_decay)});
  } else {
    groups = optim::default_param_groups(named, o.lr, o.weight_decay, o.weight_decay_1d);
    for (auto& g : groups) g.params.clear();
  }
  std::map<std::string, size_t> group_of;
  for (size_t gi = 0; gi < groups.size(); ++gi)
    for (const std::string& name : groups[gi].names) {
      TS_CHECK(
          std::any_of(named.begin(), named.end(), [&](const auto& e) { return e.first == name; }),
          "initialize: parameter group ", gi, " names '", name,
          "', which is not a parameter of the model");
      const auto [it, fresh] = group_of.emplace(name, gi);
      TS_CHECK(fresh, "initialize: parameter '", name, "' is in groups ", it->second, " and ", gi,
               "; a parameter belongs to one group");
    }
  return groups;
}

void Engine::build_optimizer(InitializeOptions& options, std::vector<optim::ParamGroup> groups) {
  std::vector<std::pair<std::string, Tensor*>> named = model_.named_parameters();
  if (compute_dtype_ != DType::Float32) {
    // float32 master weights for the optimizer; the model computes in 16 bits.
    std::vector<Tensor> masters;
    for (auto& [n, t] : named)
      masters.push_back(t->detach().to(DType::Float32).contiguous().clone());
    model_.to(compute_dtype_);
    named = model_.named_parameters();
    for (size_t i = 0; i < named.size(); ++i) master_.emplace_back(named[i].second, masters[i]);
    for (size_t i = 0; i < named.size(); ++i) named[i].second = &master_[i].second;
  }
  std::map<std::string, Tensor> by_name;
  for (auto& [n, t] : named) by_name[n] = *t;
  for (auto& g : groups)
    for (const std::string& n : g.names) g.params.push_back(by_name.at(n));
  if (options.optimizer && master_.empty()) {
    // Its tensors are the model's; their names key its state in checkpoints.
    for (size_t g = 0; g < groups.size(); ++g)
      options.optimizer->groups()[g].names = groups[g].names;
    optimizer_ = std::move(options.optimizer);
  } else if (options.optimizer) {
    optimizer_ = options.optimizer->rebuild(std::move(groups));
  } else if (options.optimizer_factory) {
    optimizer_ = options.optimizer_factory(std::move(groups));
  } else {
    optimizer_ = make_optimizer(config_, std::move(groups));
  }
  TS_CHECK(optimizer_, "initialize: the client optimizer factory returned no optimizer");
  if (!master_.empty()) {
    // The fused update reads the model's 16-bit gradients and writes its 16-bit weights.
    std::vector<std::vector<Tensor*>> copies;
    for (const auto& g : optimizer_->groups()) {
      copies.emplace_back();
      for (const Tensor& p : g.params)
        for (auto& [slot, master] : master_)
          if (master.same(p)) copies.back().push_back(slot);
    }
    optimizer_->set_model_copies(std::move(copies));
  }
}

Engine::~Engine() {
  // The group may outlive this engine: it must not call into the engine's trace any more.
  if (trace_) group_->logger().set_listener(nullptr);
}

void Engine::setup_parallel(std::vector<optim::ParamGroup> groups,
                            const optim::OptimizerFactory& make) {
  const auto& c = config_;
  const int world = group_->size();
  DType comm = compute_dtype_;
  if (c.communication_data_type == "fp32") comm = DType::Float32;
  if (c.communication_data_type == "fp16") comm = DType::Float16;
  if (c.communication_data_type == "bf16") comm = DType::BFloat16;
  // DeepSpeed's averaging order (engine.allreduce_bucket): by default ("postscale") each
  // rank multiplies by 1/gradient_predivide_factor before the sum and the sum by
  // gradient_predivide_factor/N after; prescale_gradients multiplies by 1/N before the sum.
  const double f = c.gradient_predivide_factor;
  const double pre = c.prescale_gradients ? 1.0 / world : 1.0 / f;
  const double post = c.prescale_gradients ? 1.0 : f / world;
  if (c.zero.stage == 0) {
    parallel::GradBuckets::Options bo;
    bo.bucket_numel = c.zero.reduce_bucket_size;
    bo.overlap = c.zero.overlap_comm;
    bo.pre_scale = pre;
    bo.post_scale = post;
    bo.comm_dtype = comm;
    std::vector<Tensor*> slots;
    for (auto& [n, t] : model_.named_parameters()) slots.push_back(t);
    dp_buckets_ = std::make_unique<parallel::GradBuckets>(
        group_, slots, parallel::GradBuckets::Mode::AllReduce, bo);
    return;
  }
  post_scale_ = post;  // ZeRO's partitions hold sums; the step averages them
  parallel::ZeroOptions zo;
  zo.stage = static_cast<int>(c.zero.stage);
  zo.compute_dtype = compute_dtype_;
  zo.reduce_bucket_size = c.zero.reduce_bucket_size;
  zo.overlap_comm = c.zero.overlap_comm;
  zo.pre_scale = pre;
  zo.comm_dtype = comm;
  zo.param_persistence_threshold = c.zero.stage3_param_persistence_threshold;
  zo.prefetch_bucket_size = c.zero.stage3_prefetch_bucket_size;
  zo.offload_optimizer = c.zero.offload_optimizer_device == "cpu";
  zo.pin_memory = zo.offload_optimizer && c.zero.offload_pin_memory;
  zo.allgather_bucket_size = c.zero.allgather_bucket_size;
  zero_ = std::make_unique<parallel::ZeroOptimizer>(model_, group_, zo, make, std::move(groups));
  TS_CHECK(zero_->optimizer().name() != "Lamb", "engine: zero_optimization.stage ", c.zero.stage,
           " with optimizer Lamb is not supported (LAMB's trust ratio needs whole tensors); use "
           "stage 0 or Adam/AdamW/SGD");
}

std::unique_ptr<Engine> initialize(nn::Module& model, const io::TrainConfig& config,
                                   InitializeOptions options) {
  return std::make_unique<Engine>(model, config, std::move(options));
}

std::unique_ptr<Engine> initialize(nn::Module& model, const io::TrainConfig& config,
                                   std::shared_ptr<parallel::ProcessGroup> group) {
  return std::make_unique<Engine>(model, config, std::move(group));
}

void Engine::begin_forward() {
  if (zero_) zero_->set_evaluating(!model_.is_training());
  if (trace_ && !trace_->recording() && trace_->wants(global_steps_) && model_.is_training()) {
    trace_->begin_step(global_steps_);
    update_forced_timers();
  }
}

Device Engine::device() {
  return model_.named_parameters().front().second->device();
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
  // A loop written as "gas backwards, then one step()" would accumulate twice the window.
  if (backwards_since_step_++ == 1 && !boundary_override_ && !warned_backward_twice_ &&
      rank() == 0) {
    warned_backward_twice_ = true;
    std::cerr << "warning: " << what << ": a second backward before step() (micro-step "
              << micro_steps_ << "): its gradients add to the same micro-batch. As in "
              << "DeepSpeed, call step() after every micro-batch's backward (it updates at the "
              << "accumulation boundary), or use set_gradient_accumulation_boundary\n";
  }
}

void Engine::begin_reduction(bool allreduce) {
  const bool boundary = is_gradient_accumulation_boundary() && allreduce;
  if (zero_) zero_->begin_backward(boundary || zero_->stage() >= 2);
  if (dp_buckets_) dp_buckets_->begin_backward(boundary);
}

void Engine::end_reduction() {
  if (zero_) zero_->end_backward();
  if (dp_buckets_) dp_buckets_->end_backward();
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
  const auto started = timers_.start();
  begin_reduction(options.allreduce_gradients);
  in_engine_backward_ = true;
  const auto inner = timers_.start();
  try {
    (factor == 1.0 ? loss : loss * factor).backward(Tensor(), options.retain_graph);
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
  NoGradGuard no_grad;
  return gas == 1.0 ? loss.detach() : loss.detach() / gas;
}

Tensor Engine::scale(const Tensor& loss) {
  TS_CHECK(loss.numel() == 1 && loss.requires_grad(),
           "engine.scale: expected a scalar loss that requires grad, got ", loss.describe());
  scale_expected_ = true;
  // The accumulation division goes in with the loss scale, as engine.backward applies them
  // (one factor: a float16 loss times 2^16 alone would overflow).
  const double factor = scaler_.scale() / static_cast<double>(config_.gradient_accumulation_steps);
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
  global_grad_norm_.reset();
  if (zero_) {
    const auto gradients = timers_.start();
    // Partition gradients are sums over ranks (and loss-scaled): average and unscale.
    st.grad_norm = zero_->prepare_master_grads(post_scale_ / scaler_.scale());
    global_grad_norm_ = st.grad_norm;
    st.overflow = !std::isfinite(st.grad_norm);
    if (!st.overflow && config_.gradient_clipping > 0) {
      const double coef = config_.gradient_clipping / (st.grad_norm + 1e-6);
      if (coef < 1.0) zero_->scale_master_grads(coef);
    }
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
      st.grad_norm = optim::grad_norm(holders) * unscale;
      global_grad_norm_ = st.grad_norm;
      st.overflow = !std::isfinite(st.grad_norm);
      if (!st.overflow && config_.gradient_clipping > 0)
        coef = std::min(1.0, config_.gradient_clipping / (st.grad_norm + 1e-6));
    }
    optimizer().set_grad_scale(unscale * coef);
  }
  st = apply_step(st);
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
  if (monitor_->enabled()) {
    // As DeepSpeed: after the step, the next step's lr and the current loss scale.
    std::vector<MonitorEvent> events{{"Train/Samples/lr", get_lr()[0], global_samples()}};
    if (config_.fp16.enabled)
      events.push_back({"Train/Samples/loss_scale", scaler_.scale(), global_samples()});
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
        rank() == 0) {
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

bool Engine::masters_finite() {
  double local = 0;
  for (const auto& g : optimizer().groups())
    if (!g.params.empty()) local += sum(sum_squares(g.params)).item();
  const double flag = std::isfinite(local) ? 0.0 : 1.0;
  return group_->all_reduce_scalar(flag) == 0.0;  // every rank decides alike
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
  m.grads = dp_buckets_ ? dp_buckets_->buffer_bytes()
                        : param_elems * static_cast<int64_t>(itemsize(compute_dtype_));
  for (auto& [slot, master] : master_) m.optimizer += bytes(master);
  for (auto& [k, v] : optimizer_->state_dict())
    if (k != "step") m.optimizer += bytes(v);
  return m;
}

}  // namespace tessera::engine
