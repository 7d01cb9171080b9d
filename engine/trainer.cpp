#include "tessera/engine/trainer.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "tessera/engine/stop_signals.h"

namespace tessera::engine {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string fmt_duration(double secs) {
  const int64_t s = std::isfinite(secs) ? static_cast<int64_t>(secs) : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld", static_cast<long>(s / 60), static_cast<long>(s % 60));
  return buf;
}

}  // namespace

TrainerOptions TrainerOptions::from_config(const io::TrainConfig& c) {
  TrainerOptions o;
  o.steps = c.train.steps;
  o.eval_interval = c.train.eval_interval;
  o.eval_iters = c.train.eval_iters;
  o.checkpoint_dir = c.train.checkpoint_dir;
  o.checkpoint_interval = c.train.checkpoint_interval;
  o.keep_last = c.train.keep_last;
  o.steps_per_print = c.steps_per_print;
  return o;
}

TrainLoop::TrainLoop(Engine& engine, TrainerOptions options)
    : engine_(engine), options_(std::move(options)) {
  TS_CHECK(options_.steps >= 0, "trainer: steps ", options_.steps, " < 0");
  TS_CHECK(options_.eval_iters >= 1, "trainer: eval_iters ", options_.eval_iters, " < 1");
  TS_CHECK(options_.steps_per_print >= 1, "trainer: steps_per_print ", options_.steps_per_print,
           " < 1");
  TS_CHECK(options_.checkpoint_interval <= 0 || !options_.checkpoint_dir.empty(),
           "trainer: checkpoint_interval ", options_.checkpoint_interval,
           " needs a checkpoint_dir (train.checkpoint_dir)");
  tty_ = engine_.is_lead() && ::isatty(STDERR_FILENO);
  start_threads_ = omp_get_max_threads();
}

double TrainLoop::train_step(StepStats& stats) {
  const int64_t gas = engine_.config().gradient_accumulation_steps;
  double loss_sum = 0;
  for (int64_t m = 0; m < gas; ++m) {
    const Tensor loss = forward_next();
    const double value = loss.item();
    TS_CHECK(std::isfinite(value) || engine_.config().fp16.enabled, "trainer: the loss is ", value,
             " at step ", engine_.global_steps(), "; lower the learning rate or check the data");
    loss_sum += value;
    engine_.backward(loss);
    stats = engine_.step();  // after every micro-batch (DeepSpeed's contract)
  }
  const double mean = loss_sum / static_cast<double>(gas);
  return engine_.group().all_reduce_scalar(mean, parallel::ReduceOp::Avg);
}

void TrainLoop::print_progress(int64_t step, double loss, const StepStats& stats, double rate,
                               double eta_s) {
  const bool tokens = options_.tokens_per_sample > 0;
  // Other runs starting or ending on this host re-divide its cores (parallel::rebalance_cores):
  // say so while the count differs from the start-up line's, since the rate moves with it.
  const int threads = omp_get_max_threads();
  char shared[64] = "";
  if (threads != start_threads_)
    std::snprintf(shared, sizeof shared, " | %d thread(s): cores shared with other runs", threads);
  char line[300];
  std::snprintf(line, sizeof line, "step %ld/%ld | loss %.4f | lr %.3e | %.0f %s | ETA %s%s%s",
                static_cast<long>(step), static_cast<long>(options_.steps), loss, stats.lr, rate,
                tokens ? "tok/s" : "samples/s", fmt_duration(eta_s).c_str(), shared,
                stats.overflow ? " | overflow: step skipped" : "");
  std::cerr << (tty_ ? "\r" : "") << line << (tty_ ? "\033[K" : "\n") << std::flush;
}

double TrainLoop::evaluate() {
  const bool was_training = engine_.module().is_training();
  engine_.eval();
  std::vector<double> losses;
  try {
    losses = eval_losses(options_.eval_iters);
  } catch (...) {
    engine_.train(was_training);
    throw;
  }
  engine_.train(was_training);
  if (losses.empty()) return std::numeric_limits<double>::quiet_NaN();
  double total = 0;
  for (double l : losses) total += l;
  total /= static_cast<double>(losses.size());
  total = engine_.group().all_reduce_scalar(total, parallel::ReduceOp::Avg);
  TS_CHECK(std::isfinite(total), "trainer: the validation loss at step ", engine_.global_steps(),
           " is ", total,
           ": the run diverged. Lower optimizer.params.lr, set gradient_clipping, "
           "or train in bf16");
  return total;
}

double TrainLoop::tokens_per_sample(int64_t step) {
  const auto seqlen = engine_.curriculum_seqlen(step);  // (the curriculum cuts the samples)
  return static_cast<double>(seqlen ? std::min(*seqlen, options_.tokens_per_sample)
                                    : options_.tokens_per_sample);
}

TrainResult TrainLoop::fit() {
  StopSignals signals(options_.handle_signals);
  TrainResult r;
  tokens_run_ = 0;
  const int64_t start = engine_.global_steps();
  last_saved_.clear();
  while (engine_.global_steps() < options_.steps) {
    const auto t0 = Clock::now();
    StepStats st;
    const double step_tokens = tokens_per_sample(engine_.global_steps()) *
                               static_cast<double>(engine_.config().train_batch_size);
    r.train_loss = train_step(st);
    tokens_run_ += step_tokens;
    r.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    r.step = engine_.global_steps();
    r.steps_run = r.step - start;
    report_step(r, st);
    if ((r.stop_signal = agreed_stop_signal()) != 0) break;
    if (options_.eval_interval > 0 && r.step % options_.eval_interval == 0 &&
        r.step < options_.steps) {
      r.val_loss = evaluate();
      if (std::isfinite(r.val_loss))
        engine_.write_events({{"Eval/val_loss", r.val_loss, engine_.global_samples()}});
      if (engine_.is_lead() && std::isfinite(r.val_loss))
        std::cerr << (tty_ ? "\n" : "") << "step " << r.step << ": val loss " << r.val_loss << "\n";
    }
    if (options_.checkpoint_interval > 0 && r.step % options_.checkpoint_interval == 0)
      save_once(options_.checkpoint_dir);
  }
  if (tty_) std::cerr << "\n";
  r.comms = engine_.group().logger().totals();  // the training steps' alone
  if (auto* tp = engine_.tensor_parallel_group()) r.tp_comms = tp->logger().totals();
  if (auto* ep = engine_.expert_parallel_group()) r.ep_comms = ep->logger().totals();
  if (auto* edp = engine_.expert_data_parallel_group()) r.expert_dp_comms = edp->logger().totals();
  r.moe_aux_loss = engine_.moe_aux_loss();
  r.step = engine_.global_steps();
  r.steps_run = r.step - start;
  const double samples = static_cast<double>(r.steps_run * engine_.config().train_batch_size);
  r.samples_per_s = r.seconds > 0 ? samples / r.seconds : 0.0;
  r.tokens_per_s = r.seconds > 0 ? tokens_run_ / r.seconds : 0.0;
  finish(r);
  return r;
}

void TrainLoop::report_step(const TrainResult& r, const StepStats& st) {
  if (!engine_.wrote_train_loss())  // (a pipeline's stages do not see the loss)
    engine_.write_events({{"Train/Samples/train_loss", r.train_loss, engine_.global_samples()}});
  if (!engine_.is_lead()) return;
  const double samples_s = static_cast<double>(r.steps_run * engine_.config().train_batch_size) /
                           std::max(r.seconds, 1e-9);
  const double rate =
      options_.tokens_per_sample > 0 ? tokens_run_ / std::max(r.seconds, 1e-9) : samples_s;
  const double eta =
      static_cast<double>(options_.steps - r.step) * r.seconds / static_cast<double>(r.steps_run);
  if (tty_ || r.step % options_.steps_per_print == 0 || r.step == options_.steps)
    print_progress(r.step, r.train_loss, st, rate, eta);
}

int TrainLoop::agreed_stop_signal() {
  // Every rank stops at the same step: the signal may reach them at different times.
  int sig = stop_signal_received();
  if (engine_.world_size() > 1)
    sig = static_cast<int>(engine_.group().all_reduce_scalar(sig, parallel::ReduceOp::Max));
  if (auto* tp = engine_.tensor_parallel_group())  // (data x tensor: the whole job agrees)
    sig = static_cast<int>(tp->all_reduce_scalar(sig, parallel::ReduceOp::Max));
  if (auto* pipe = engine_.pipeline_group())
    sig = static_cast<int>(pipe->all_reduce_scalar(sig, parallel::ReduceOp::Max));
  if (sig != 0 && engine_.is_lead())
    std::cerr << (tty_ ? "\n" : "") << "stopping at step " << engine_.global_steps() << " ("
              << (sig == SIGINT    ? "SIGINT"
                  : sig == SIGTERM ? "SIGTERM"
                                   : "a signal")
              << ")\n";
  return sig;
}

void TrainLoop::finish(TrainResult& r) {
  const bool lead = engine_.is_lead();
  if (r.stop_signal != 0) {
    // The last completed step, where a resumed run continues.
    const std::string& dir =
        options_.checkpoint_dir.empty() ? options_.save_dir : options_.checkpoint_dir;
    if (dir.empty() && lead)
      std::cerr << "warning: no checkpoint_dir or save directory: the stopped run is not saved\n";
    save_once(dir);
    save_once(options_.save_dir);
    return;
  }
  // A run is not a success because it reached its last step: fp16 skips non-finite steps, so a
  // diverged run gets there too.
  TS_CHECK(r.steps_run == 0 || std::isfinite(r.train_loss), "trainer: the loss at the last step (",
           r.step, ") is ", r.train_loss, " after ", engine_.skipped_steps(),
           " skipped steps: the run diverged. Lower optimizer.params.lr, set gradient_clipping, "
           "or train in bf16");
  r.val_loss = evaluate();
  if (std::isfinite(r.val_loss))
    engine_.write_events({{"Eval/val_loss", r.val_loss, engine_.global_samples()}});
  if (lead) {
    const bool tokens = options_.tokens_per_sample > 0;
    std::cerr << "step " << r.step << ":";
    if (std::isfinite(r.val_loss)) std::cerr << " val loss " << r.val_loss;
    std::cerr << " (" << r.steps_run << " steps in " << fmt_duration(r.seconds) << ", "
              << static_cast<int64_t>(tokens ? r.tokens_per_s : r.samples_per_s)
              << (tokens ? " tokens/s)\n" : " samples/s)\n");
  }
  save_once(options_.save_dir);
  // (ZeRO-3 gathers parameters, a tensor-parallel model its logits and MoE layers with
  // expert parallelism send tokens to other ranks' experts: every rank samples.)
  if (sample && (lead || engine_.zero_stage() == 3 || engine_.tensor_parallel_group() ||
                 engine_.expert_parallel_group())) {
    const std::string text = sample();
    if (lead) std::cout << "---- sample ----\n" << text << "\n----------------\n" << std::flush;
  }
}

void TrainLoop::save_once(const std::string& dir) {
  if (dir.empty()) return;
  const std::string key =
      fs::path(dir).lexically_normal().string() + "\n" + std::to_string(engine_.global_steps());
  if (key == last_saved_) return;  // (the interval may have just written this step there)
  if (tty_) std::cerr << "\n";
  save(dir);
  last_saved_ = key;
}

void TrainLoop::save(const std::string& dir) {
  const std::string tag = "step" + std::to_string(engine_.global_steps());
  nlohmann::json state{{"data", data_state()}};
  if (client_state) state["user"] = client_state();
  engine_.save_checkpoint(dir, tag, state, /*save_latest=*/true,
                          extra_files ? extra_files() : std::map<std::string, std::string>{});
  if (!engine_.is_lead()) return;
  std::cerr << "checkpoint: " << (fs::path(dir) / tag).string() << "\n";
  if (options_.keep_last > 0 && fs::path(dir) == fs::path(options_.checkpoint_dir))
    remove_old_checkpoints(dir, tag);
}

nlohmann::json TrainLoop::resume(const std::string& dir, const std::string& tag) {
  const LoadedCheckpoint loaded = engine_.load_checkpoint(dir, tag);
  const nlohmann::json& cs = loaded.client_state;
  if (cs.is_object() && cs.contains("data"))
    set_data_state(cs["data"]);
  else if (engine_.is_lead())
    std::cerr << "warning: trainer: resume: the checkpoint '" << loaded.path
              << "' holds no data position (client_state.data: not saved by a Trainer, or by an "
                 "older tessera); the data starts from its beginning\n";
  if (engine_.is_lead()) std::cerr << "resumed at step " << engine_.global_steps() << "\n";
  return cs.is_object() && cs.contains("user") ? cs["user"] : nlohmann::json();
}

// keep_last: the newest step<N> checkpoints stay, never the one just written.
void TrainLoop::remove_old_checkpoints(const std::string& dir, const std::string& newest) const {
  std::vector<std::pair<int64_t, fs::path>> steps;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.rfind("step", 0) != 0 || name == newest) continue;
    const std::string digits = name.substr(4);
    if (digits.empty() || digits.size() > 15 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    steps.emplace_back(std::stoll(digits), e.path());
  }
  std::sort(steps.rbegin(), steps.rend());
  for (size_t i = static_cast<size_t>(options_.keep_last) - 1; i < steps.size(); ++i) {
    std::error_code ec;
    fs::remove_all(steps[i].second, ec);
    if (ec)
      std::cerr << "warning: keep_last: cannot remove '" << steps[i].second.string()
                << "': " << ec.message() << "\n";
  }
}

}  // namespace tessera::engine
