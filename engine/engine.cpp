#include "tessera/engine/engine.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops.h"
#include "tessera/rng.h"

namespace tessera::engine {

namespace fs = std::filesystem;

std::unique_ptr<optim::LRSchedule> make_schedule(const io::TrainConfig& c) {
  const auto& s = c.scheduler;
  auto p = [&](const char* k, double fallback) {
    auto it = s.params.find(k);
    return it == s.params.end() ? fallback : it->second;
  };
  const auto wt = s.warmup_type == "linear" ? optim::WarmupType::Linear : optim::WarmupType::Log;
  const double lr = c.optimizer.lr;
  if (s.type.empty()) return std::make_unique<optim::ConstantLR>(lr);
  if (s.type == "WarmupLR")
    return std::make_unique<optim::WarmupLR>(p("warmup_min_lr", 0.0), p("warmup_max_lr", 0.001),
                                             static_cast<int64_t>(p("warmup_num_steps", 1000)), wt);
  if (s.type == "WarmupDecayLR")
    return std::make_unique<optim::WarmupDecayLR>(
        static_cast<int64_t>(p("total_num_steps", 0)), p("warmup_min_lr", 0.0),
        p("warmup_max_lr", 0.001), static_cast<int64_t>(p("warmup_num_steps", 1000)), wt);
  if (s.type == "WarmupCosineLR")
    return std::make_unique<optim::WarmupCosineLR>(
        lr, static_cast<int64_t>(p("total_num_steps", 0)), p("warmup_min_ratio", 0.0),
        static_cast<int64_t>(p("warmup_num_steps", 1000)), p("cos_min_ratio", 0.0001), wt);
  if (s.type == "OneCycle")
    return std::make_unique<optim::OneCycle>(p("cycle_min_lr", 0.0), p("cycle_max_lr", 0.001),
                                             p("decay_lr_rate", 0.0),
                                             static_cast<int64_t>(p("cycle_first_step_size", 2000)),
                                             static_cast<int64_t>(p("cycle_second_step_size", 0)),
                                             static_cast<int64_t>(p("decay_step_size", 0)));
  if (s.type == "LRRangeTest")
    return std::make_unique<optim::LRRangeTest>(
        p("lr_range_test_min_lr", 1e-3), static_cast<int64_t>(p("lr_range_test_step_size", 2000)),
        p("lr_range_test_step_rate", 1.0), p("lr_range_test_staircase", 0) != 0);
  fail("scheduler type '", s.type, "' is not supported");
}

Engine::Engine(nn::Module& model, io::TrainConfig config)
    : model_(model), config_(std::move(config)) {
  const auto& o = config_.optimizer;
  if (config_.fp16.enabled) compute_dtype_ = DType::Float16;
  if (config_.bf16) compute_dtype_ = DType::BFloat16;
  std::vector<std::pair<std::string, Tensor*>> named = model_.named_parameters();
  TS_CHECK(!named.empty(), "engine: the model has no parameters");
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
  auto groups = optim::default_param_groups(named, o.lr, o.weight_decay);
  if (o.type == "SGD") {
    optimizer_ = std::make_unique<optim::SGD>(
        groups, optim::SGDOptions{o.momentum, o.dampening, o.nesterov});
  } else if (o.type == "Lamb") {
    optimizer_ = std::make_unique<optim::Lamb>(
        groups, optim::LambOptions{o.beta1, o.beta2, o.eps, o.max_coeff, o.min_coeff});
  } else {
    optimizer_ = std::make_unique<optim::Adam>(
        groups, optim::AdamOptions{o.beta1, o.beta2, o.eps, o.adam_w_mode});
  }
  schedule_ = make_schedule(config_);
  if (config_.fp16.enabled) {
    const bool dynamic = config_.fp16.loss_scale == 0.0;
    scaler_ = LossScaler(
        dynamic,
        dynamic ? std::pow(2.0, config_.fp16.initial_scale_power) : config_.fp16.loss_scale,
        config_.fp16.loss_scale_window, config_.fp16.hysteresis,
        config_.fp16.consecutive_hysteresis, config_.fp16.min_loss_scale);
  }
  model_.train();
}

std::unique_ptr<Engine> initialize(nn::Module& model, const io::TrainConfig& config) {
  return std::make_unique<Engine>(model, config);
}

Tensor Engine::forward(const models::Batch& batch) {
  auto* m = dynamic_cast<models::PretrainedModel*>(&model_);
  TS_CHECK(m,
           "engine.forward: the model is not a built-in one; call your model's forward and pass "
           "its loss to backward");
  return m->loss(batch);
}

bool Engine::is_gradient_accumulation_boundary() const {
  return micro_steps_ > 0 && micro_steps_ % config_.gradient_accumulation_steps == 0;
}

void Engine::backward(const Tensor& loss) {
  TS_CHECK(loss.numel() == 1, "engine.backward: expected a scalar loss, got ", loss.describe());
  const double factor = scaler_.scale() / static_cast<double>(config_.gradient_accumulation_steps);
  (factor == 1.0 ? loss : loss * factor).backward();
  ++micro_steps_;
}

std::vector<Tensor> Engine::master_params() {
  std::vector<Tensor> out;
  for (auto& g : optimizer_->groups())
    for (auto& p : g.params) out.push_back(p);
  return out;
}

void Engine::sync_master_to_model() {
  NoGradGuard no_grad;
  for (auto& [slot, master] : master_) slot->copy_(master);
}

StepStats Engine::step() {
  StepStats st;
  st.lr = lr();
  st.loss_scale = scaler_.scale();
  if (!is_gradient_accumulation_boundary()) return st;
  NoGradGuard no_grad;
  if (!master_.empty()) {
    const double unscale = 1.0 / scaler_.scale();
    for (auto& [slot, master] : master_) {
      const Tensor g = slot->grad();
      master.set_grad(g.defined()
                          ? (unscale == 1.0 ? g.to(DType::Float32) : g.to(DType::Float32) * unscale)
                          : Tensor());
      slot->set_grad(Tensor());
    }
  }
  const std::vector<Tensor> params = master_params();
  if (config_.fp16.enabled || config_.gradient_clipping > 0) {
    st.grad_norm = config_.gradient_clipping > 0
                       ? optim::clip_grad_norm(params, config_.gradient_clipping)
                       : optim::grad_norm(params);
    st.overflow = !std::isfinite(st.grad_norm);
  }
  if (st.overflow && !config_.fp16.enabled)
    fail("engine.step: the gradient norm is ", st.grad_norm, " at step ", global_steps_,
         " (inf/NaN gradients); lower the learning rate or check the data");
  if (st.overflow) {
    ++skipped_steps_;
    scaler_.update(true);
  } else {
    optimizer_->set_lr(lr());
    optimizer_->step();
    scaler_.update(false);
    ++schedule_step_;
    st.stepped = true;
    if (!master_.empty()) sync_master_to_model();
  }
  optimizer_->zero_grad();
  model_.zero_grad();
  ++global_steps_;
  st.loss_scale = scaler_.scale();
  return st;
}

void Engine::save_checkpoint(const std::string& dir, const std::string& tag,
                             const nlohmann::json& client_state) {
  TS_CHECK(!tag.empty() && tag.find('/') == std::string::npos && tag != "latest",
           "save_checkpoint: invalid tag '", tag, "'");
  fs::create_directories(dir);
  const fs::path final_dir = fs::path(dir) / tag;
  const fs::path tmp = fs::path(dir) / ("." + tag + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::map<std::string, Tensor> weights;
  if (master_.empty()) {
    weights = model_.state_dict();
  } else {
    const auto named = model_.named_parameters();
    for (size_t i = 0; i < named.size(); ++i) weights[named[i].first] = master_[i].second;
  }
  io::save_safetensors((tmp / "model.safetensors").string(), weights);
  io::save_safetensors((tmp / "optimizer.safetensors").string(), optimizer_->state_dict());
  const GeneratorState rng = default_generator().state();
  const auto sc = scaler_.state();
  const nlohmann::json state{{"global_steps", global_steps_},
                             {"micro_steps", micro_steps_},
                             {"skipped_steps", skipped_steps_},
                             {"schedule_step", schedule_step_},
                             {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                             {"loss_scaler",
                              {{"scale", sc.scale},
                               {"cur_iter", sc.cur_iter},
                               {"last_overflow_iter", sc.last_overflow_iter},
                               {"cur_hysteresis", sc.cur_hysteresis}}},
                             {"optimizer", optimizer_->name()},
                             {"dtype", dtype_name(compute_dtype_)},
                             {"client_state", client_state}};
  io::write_file_atomically((tmp / "engine.json").string(),
                            [&](std::ostream& os) { os << state.dump(2); });
  // Swap the finished directory into place, then point `latest` at it.
  const fs::path old = fs::path(dir) / ("." + tag + ".old-" + std::to_string(::getpid()));
  if (fs::exists(final_dir)) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  fs::remove_all(old);
  io::write_file_atomically((fs::path(dir) / "latest").string(),
                            [&](std::ostream& os) { os << tag; });
}

nlohmann::json Engine::load_checkpoint(const std::string& dir, const std::string& tag_in) {
  std::string tag = tag_in;
  if (tag.empty()) {
    const fs::path latest = fs::path(dir) / "latest";
    TS_CHECK(fs::exists(latest), "load_checkpoint: '", latest.string(),
             "' does not exist (no checkpoint saved in '", dir, "'?)");
    tag = io::read_text_file(latest.string());
    while (!tag.empty() && (tag.back() == '\n' || tag.back() == ' ')) tag.pop_back();
  }
  const fs::path d = fs::path(dir) / tag;
  TS_CHECK(fs::is_directory(d), "load_checkpoint: '", d.string(), "' does not exist");
  nlohmann::json state;
  try {
    state = nlohmann::json::parse(io::read_text_file((d / "engine.json").string()));
  } catch (const nlohmann::json::exception& e) {
    fail("load_checkpoint: '", (d / "engine.json").string(), "': ", e.what());
  }
  const auto weights = io::load_safetensors((d / "model.safetensors").string());
  NoGradGuard no_grad;
  if (master_.empty()) {
    model_.load_state_dict(weights);
  } else {
    const auto named = model_.named_parameters();
    for (size_t i = 0; i < named.size(); ++i) {
      auto it = weights.find(named[i].first);
      TS_CHECK(it != weights.end(), "load_checkpoint: '", (d / "model.safetensors").string(),
               "' has no '", named[i].first, "'");
      master_[i].second.copy_(it->second);
    }
    sync_master_to_model();
  }
  optimizer_->load_state_dict(io::load_safetensors((d / "optimizer.safetensors").string()));
  global_steps_ = state.at("global_steps");
  micro_steps_ = state.at("micro_steps");
  skipped_steps_ = state.at("skipped_steps");
  schedule_step_ = state.at("schedule_step");
  default_generator().set_state(
      {state["rng"]["seed"].get<uint64_t>(), state["rng"]["offset"].get<uint64_t>()});
  const auto& ls = state["loss_scaler"];
  scaler_.set_state({ls["scale"], ls["cur_iter"], ls["last_overflow_iter"], ls["cur_hysteresis"]});
  return state.value("client_state", nlohmann::json());
}

}  // namespace tessera::engine
