// Engine checkpoints: save on every rank together, load at any rank count and ZeRO stage.
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>

#include "tessera/engine/checkpoint_state.h"
#include "tessera/engine/engine.h"
#include "tessera/grad_mode.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops.h"
#include "tessera/parallel/tensor_parallel_layout.h"
#include "tessera/parallel/zero_checkpoint.h"
#include "tessera/parallel/zero_config.h"
#include "tessera/rng.h"

namespace tessera::engine {

namespace fs = std::filesystem;

namespace {

// Moves the finished `tmp` to `final_dir`. An existing `final_dir` (a tag saved again) is
// exchanged with it in one step (renameat2 RENAME_EXCHANGE), so a process killed at any point
// leaves a complete directory under the tag `latest` may name; filesystems without exchange
// fall back to rename-aside, which has a short window without it.
void publish_directory(const fs::path& tmp, const fs::path& final_dir) {
  if (!fs::exists(final_dir)) {
    fs::rename(tmp, final_dir);
    return;
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp);  // now the previous contents
    return;
  }
  std::string old_name = final_dir.filename().string();
  old_name.insert(0, 1, '.');
  old_name += ".old";
  const fs::path old = final_dir.parent_path() / old_name;
  fs::remove_all(old);
  fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  fs::remove_all(old);
}

}  // namespace

void Engine::save_checkpoint(const std::string& dir, const std::string& tag_or_default,
                             const nlohmann::json& client_state, bool save_latest,
                             const std::map<std::string, std::string>& extra_files) {
  TS_CHECK(!dir.empty(), "save_checkpoint: the directory must be a non-empty path");
  const std::string tag =
      tag_or_default.empty() ? "global_step" + std::to_string(global_steps_) : tag_or_default;
  TS_CHECK(tag.find('/') == std::string::npos && tag != "latest" && tag != "." && tag != "..",
           "save_checkpoint: invalid tag '", tag, "'");
  const bool writer = is_lead();
  // Every rank writes into one temporary directory, named after the lead rank's process.
  Tensor pid = full({1}, writer ? static_cast<double>(::getpid()) : 0.0, DType::Int64);
  group_->broadcast(pid, 0);
  if (tp_group_) tp_group_->broadcast(pid, 0);      // (data x tensor: the lead's, everywhere)
  if (pipe_group_) pipe_group_->broadcast(pid, 0);  // (x pipe: stage 0's)
  const std::string suffix = std::to_string(static_cast<int64_t>(pid.item()));
  const fs::path final_dir = fs::path(dir) / tag;
  const fs::path tmp = fs::path(dir) / ("." + tag + ".tmp-" + suffix);
  if (writer) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!ec) fs::remove_all(tmp, ec);
    if (!ec) fs::create_directories(tmp, ec);
    TS_CHECK(!ec, "save_checkpoint: cannot create '", tmp.string(), "': ", ec.message());
  }
  job_barrier();
  try {
    write_checkpoint_files(tmp, client_state, extra_files);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);  // a failed save leaves nothing behind; `latest` is untouched
    throw;
  }
  if (zero_) zero_->swap_out_state();  // (NVMe offload: the state the save read goes back out)
  job_barrier();
  if (writer) {
    // Swap the finished directory into place, then point `latest` at it.
    publish_directory(tmp, final_dir);
    if (save_latest)
      io::write_file_atomically((fs::path(dir) / "latest").string(),
                                [&](std::ostream& os) { os << tag; });
  }
  job_barrier();
}

void Engine::job_barrier() {
  group_->barrier();
  if (tp_group_) tp_group_->barrier();  // every data-parallel group has entered: all ranks
  if (pipe_group_) pipe_group_->barrier();
}

int Engine::tp_file_rank() const {
  return tp_group_ ? tp_group_->rank() : -1;  // one file per tensor-parallel rank, or none
}

void Engine::write_checkpoint_files(const fs::path& tmp, const nlohmann::json& client_state,
                                    const std::map<std::string, std::string>& extra_files) {
  const int rank = group_->rank();
  const bool writer = rank == 0;  // of this tensor-parallel rank's weights (each TP rank's)
  if (checkpoint_files_) {
    checkpoint_files_->write(*this, tmp);
  } else if (zero_) {
    std::map<std::string, Tensor> shard = zero_->shard_state();
    // (MoE expert parallelism: the experts, whole, in their own files.)
    if (zero_->expert_layout()) write_zero_expert_files(tmp, shard);
    shard["step"] = full({}, static_cast<double>(zero_->optimizer().step_count()), DType::Int64);
    io::save_safetensors((tmp / parallel::zero_shard_file(rank, tp_file_rank())).string(), shard);
  }
  if (!zero_ && !checkpoint_files_) write_optimizer_rank_state(tmp);
  if (!zero_ && !checkpoint_files_ && (writer || !expert_slots_.empty())) {
    std::map<std::string, Tensor> weights, opt = optimizer_->state_dict();
    if (master_.empty()) {
      weights = model_.state_dict();
    } else {
      const auto named = model_.named_parameters();
      for (size_t i = 0; i < named.size(); ++i) weights[named[i].first] = master_[i].second;
    }
    // (MoE expert parallelism: each expert-parallel rank's experts in files of their own.)
    if (!expert_slots_.empty()) write_expert_files(tmp, weights, opt);
    if (writer) {
      io::save_safetensors((tmp / checkpoint_weights_file("model", tp_file_rank())).string(),
                           weights);
      io::save_safetensors((tmp / checkpoint_weights_file("optimizer", tp_file_rank())).string(),
                           opt);
    }
  }
  if (writer && !checkpoint_files_) {
    if (zero_ && zero_->stage() < 3) {
      // Whole weights (the model's dtype) for tools that read model.safetensors; ZeRO-3 has
      // none on one rank: `tessera zero-to-fp32` rebuilds them from the shards. (Experts are
      // in their own files.)
      std::map<std::string, Tensor> weights = model_.state_dict();
      for (auto& [name, t] : model_.named_parameters())
        if (is_expert(t)) weights.erase(name);
      io::save_safetensors((tmp / checkpoint_weights_file("model", tp_file_rank())).string(),
                           weights);
    }
  }
  const nlohmann::json fp8 = fp8_ ? fp8_state() : nlohmann::json();  // (collective)
  if (is_lead()) {
    const GeneratorState rng = default_generator().state();
    const auto sc = scaler_.state();
    nlohmann::json state{{"global_steps", global_steps_},
                         {"micro_steps", micro_steps_},
                         {"skipped_steps", skipped_steps_},
                         {"schedule_step", schedule_step_},
                         {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
                         {"loss_scaler",
                          {{"scale", sc.scale},
                           {"cur_iter", sc.cur_iter},
                           {"last_overflow_iter", sc.last_overflow_iter},
                           {"cur_hysteresis", sc.cur_hysteresis}}},
                         {"optimizer", optimizer().name()},
                         {"dtype", dtype_name(compute_dtype_)},
                         {"world_size", group_->size()},
                         {"client_state", client_state}};
    if (zero_) state["zero"] = parallel::zero_metadata(zero_->stage(), zero_->layout());
    if (fp8_) state["fp8"] = fp8;
    // How the shards merge (a load at another size, zero-to-fp32, export); other files (a
    // pipeline's layers) say it themselves.
    if (checkpoint_files_) checkpoint_files_->describe(state);
    if (tp_group_) {
      state["tensor_parallel"] = {{"size", tp_group_->size()}};
      if (!checkpoint_files_)
        state["tensor_parallel"]["layout"] =
            parallel::layout_to_json(parallel::tensor_parallel_layout(model_));
    }
    // A model that describes its architecture (the built-in models: their HF config), so
    // tools can rebuild it (zero-to-fp32, export). Not named config.json: the tag directory is
    // not an HF model directory (its weights are in Tessera's layout) and must not look like one.
    if (const std::string described = model_.config_json(); !described.empty())
      io::write_file_atomically((tmp / kModelConfigFile).string(),
                                [&](std::ostream& os) { os << described << "\n"; });
    for (const auto& file : extra_files) {
      const std::string& name = file.first;
      const std::string& content = file.second;  // (captured below: not a structured binding)
      const fs::path p = tmp / name;
      TS_CHECK(
          !name.empty() && fs::path(name).is_relative() && name.find("..") == std::string::npos,
          "save_checkpoint: extra file '", name, "' must stay inside the checkpoint");
      fs::create_directories(p.parent_path());
      io::write_file_atomically(p.string(), [&](std::ostream& os) { os << content; });
    }
    io::write_file_atomically((tmp / "engine.json").string(),
                              [&](std::ostream& os) { os << state.dump(2); });
  }
}

bool Engine::save_16bit_model(const std::string& dir, const std::string& file) {
  TS_CHECK(!dir.empty() && !file.empty() && file.find('/') == std::string::npos && file != "." &&
               file != "..",
           "save_16bit_model: '", file, "' in '", dir, "' is not a file name in a directory");
  const fs::path path = fs::path(dir) / file;
  TS_CHECK(expert_slots_.empty(), "save_16bit_model: '", path.string(),
           "': with MoE expert parallelism (ep_size > 1) each rank holds only its experts; "
           "save a checkpoint (its experts are in moe_experts_*.safetensors) and run "
           "`tessera zero-to-fp32` on it for the whole model");
  if (zero_ && zero_->stage() == 3 &&
      !parallel::zero_config(config_).stage3_gather_16bit_weights_on_model_save) {
    if (rank() == 0)
      std::cerr << "save_16bit_model: did not save '" << path.string()
                << "': ZeRO-3 holds a shard of each parameter and "
                   "zero_optimization.stage3_gather_16bit_weights_on_model_save is false\n";
    return false;
  }
  std::map<std::string, Tensor> weights;
  {
    NoGradGuard no_grad;
    if (zero_ && zero_->stage() == 3) {
      // Every rank copies every parameter in the same (name) order; each copy gathers it.
      zero_->set_evaluating(true);
      for (const auto& [name, t] : model_.state_dict()) weights[name] = t.clone();
      zero_->set_evaluating(!model_.is_training());
    } else if (rank() == 0) {
      weights = model_.state_dict();
    }
  }
  if (rank() == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    TS_CHECK(!ec, "save_16bit_model: cannot create '", dir, "': ", ec.message());
    io::save_safetensors(path.string(), weights);
  }
  group_->barrier();
  return true;
}

namespace {

// The tag `latest` names, or an error saying why there is none.
std::string latest_tag(const std::string& dir) {
  const fs::path latest = fs::path(dir) / "latest";
  TS_CHECK(fs::exists(latest), "checkpoint: '", latest.string(),
           "' does not exist (no checkpoint saved in '", dir, "'?)");
  std::string tag = io::read_text_file(latest.string());
  while (!tag.empty() && std::isspace(static_cast<unsigned char>(tag.back()))) tag.pop_back();
  TS_CHECK(!tag.empty(), "checkpoint: '", latest.string(),
           "' is empty: it should name the newest checkpoint's tag");
  TS_CHECK(tag.find('/') == std::string::npos && tag != "." && tag != "..", "checkpoint: '",
           latest.string(), "' names '", tag, "', which is not a tag");
  TS_CHECK(fs::is_directory(fs::path(dir) / tag), "checkpoint: '", latest.string(), "' names tag '",
           tag, "', but '", (fs::path(dir) / tag).string(), "' does not exist");
  return tag;
}

// ZeRO: the masters and optimizer state, whole, from every replica's partitions (collective
// over the data-parallel group, and over their replicas for MoE experts).
void gather_zero_state(parallel::ZeroOptimizer& zero, std::map<std::string, Tensor>& weights,
                       std::map<std::string, Tensor>& opt) {
  const std::map<std::string, Tensor> shards = zero.shard_state();
  parallel::gather_whole_state(zero.group(), zero.layout(), shards, weights, opt);
  if (const parallel::ShardLayout* experts = zero.expert_layout())
    parallel::gather_whole_state(*zero.expert_data_group(), *experts, shards, weights, opt);
  const auto state = zero.optimizer().state_dict();
  if (state.count("step")) opt["step"] = state.at("step");
  zero.swap_out_state();  // (NVMe offload: what the gather read goes back out)
}

// Optimizers whose saved state means the same thing: Adam and AdamW keep the same moments.
std::string optimizer_family(const std::string& name) {
  return name == "AdamW" ? "Adam" : name;
}

}  // namespace

std::string checkpoint_tag_dir(const std::string& dir, const std::string& tag) {
  const fs::path d = fs::path(dir) / (tag.empty() ? latest_tag(dir) : tag);
  TS_CHECK(fs::is_directory(d), "checkpoint '", d.string(), "' does not exist");
  return d.string();
}

LoadedCheckpoint Engine::load_checkpoint(const std::string& dir, const std::string& tag,
                                         const LoadCheckpointOptions& options) {
  const fs::path d = checkpoint_tag_dir(dir, tag);
  const std::string meta_path = (d / "engine.json").string();
  TS_CHECK(fs::exists(meta_path), "load_checkpoint: '", meta_path,
           "' does not exist (not a Tessera checkpoint?)");
  const nlohmann::json state = io::JsonFields::parse_file(meta_path);
  const io::JsonFields meta(state, "load_checkpoint: '" + meta_path + "'");
  const bool load_optimizer = options.load_optimizer_states && !options.load_module_only;
  if (load_optimizer) {
    // What the saved state means must match what it is loaded into.
    const std::string saved_opt = meta.string("optimizer");
    TS_CHECK(optimizer_family(saved_opt) == optimizer_family(optimizer().name()), meta.where(),
             ": the checkpoint's optimizer is ", saved_opt, " but this run's is ",
             optimizer().name(), ": its state (", saved_opt == "SGD" ? "momentum" : "moments",
             ") would be loaded as ", optimizer().name(),
             "'s (load_optimizer_states = false loads the weights alone)");
    if (saved_opt != optimizer().name() && rank() == 0)
      std::cerr << "warning: " << meta_path << ": saved with " << saved_opt << ", resumed as "
                << optimizer().name() << " (same moments, other weight decay)\n";
  }
  meta.integer("global_steps", 0);  // checked here, read by restore_engine_state
  TS_CHECK(options.load_module_strict || !zero_, "load_checkpoint: load_module_strict = false ",
           "is not supported with ZeRO (stage ", zero_stage(),
           "): every parameter's partition must be in the checkpoint");
  NoGradGuard no_grad;
  load_weights_and_optimizer(d, state, options.load_module_strict, load_optimizer);
  if (!options.load_module_only) {
    restore_engine_state(state, options.load_lr_scheduler_states);
    load_fp8_state(state, "load_checkpoint: '" + meta_path + "'");
  }
  return {d.string(), state.value("client_state", nlohmann::json())};
}

// A strict load takes every weight the checkpoint holds and gives every parameter a value: a
// name this model lacks (a layer more, another architecture) is an error listing both sides,
// not a silently dropped layer. (Buffers may be missing: ZeRO checkpoints hold none.)
void Engine::check_weight_names(const std::string& checkpoint,
                                const std::map<std::string, Tensor>& weights) {
  std::set<std::string> known;
  std::vector<std::string> missing, unexpected;
  for (auto& p : model_.named_parameters()) {
    known.insert(p.first);
    if (!weights.count(p.first)) missing.push_back(p.first);
  }
  for (auto& b : model_.named_buffers(true)) known.insert(b.first);
  for (const auto& w : weights)
    if (!known.count(w.first)) unexpected.push_back(w.first);
  if (!missing.empty() || !unexpected.empty()) fail_key_mismatch(checkpoint, missing, unexpected);
}

void Engine::load_weights_and_optimizer(const fs::path& d, const nlohmann::json& state, bool strict,
                                        bool load_optimizer) {
  const io::JsonFields meta(state, "load_checkpoint: '" + (d / "engine.json").string() + "'");
  const int64_t saved_tp =
      state.contains("tensor_parallel") ? meta.object("tensor_parallel").integer("size", 1) : 1;
  const int tp = tp_group_ ? tp_group_->size() : 1;
  if (checkpoint_files_) {
    checkpoint_files_->load(*this, d, strict, load_optimizer);
    return;
  }
  // (MoE experts come whole from their files: the general path below.)
  if (zero_ && state.contains("zero") && saved_tp == tp && !zero_->expert_layout()) {
    // Each rank reads only the parts of the saved shards that make up its own partition.
    const parallel::ConsolidatedState c =
        parallel::load_zero_partition(d.string(), zero_->layout(), group_->rank(), tp_file_rank());
    zero_->load_partition_state(c.masters, load_optimizer ? &c.optimizer : nullptr);
    return;
  }
  // Whole (unsharded) masters and optimizer state, whatever stage and size saved them.
  std::map<std::string, Tensor> weights, opt_state;
  if (saved_tp == tp && !state.contains("pipeline")) {
    RankCheckpointState mine =
        read_rank_checkpoint(d.string(), state.contains("zero"), tp_file_rank(), load_optimizer);
    weights = std::move(mine.weights);
    opt_state = std::move(mine.optimizer);
  } else {
    // Another tensor-parallel size, or a pipeline's layer files: the whole model's state, cut
    // into this rank's shards.
    WholeCheckpointState whole = read_whole_checkpoint(d.string(), load_optimizer);
    const parallel::TensorParallelLayout layout = parallel::tensor_parallel_layout(model_);
    const int r = tp_group_ ? tp_group_->rank() : 0;
    weights = parallel::shard_state(whole.weights, layout, r, tp);
    opt_state = parallel::shard_state(whole.optimizer, layout, r, tp);
  }
  if (!moe_stats_.empty()) keep_own_experts(weights, opt_state);
  if (strict) check_weight_names(d.string(), weights);
  if (!zero_ && master_.empty()) {  // the buffers too (ZeRO's checkpoints hold none)
    model_.load_state_dict(weights, strict && !state.contains("zero"));
    if (load_optimizer) optimizer_->load_state_dict(opt_state);
  } else {
    load_training_state(weights, load_optimizer ? &opt_state : nullptr, d.string());
  }
  if (load_optimizer && !zero_) {
    // (A pipeline's checkpoint keeps this state per stage: it loads into the same stages.)
    check_stage_state_count(d.string(), 1, optimizer_->takes_data_parallel_transport(),
                            optimizer_->name());
    load_optimizer_rank_state(d);
  }
}

void Engine::write_optimizer_rank_state(const fs::path& dir) {
  if (zero_) return;  // (ZeRO's shards are per rank already; the 1-bit optimizers refuse it)
  // State each rank holds its own of (1-bit Adam's compression errors).
  const std::map<std::string, Tensor> mine = optimizer_->rank_state();
  if (mine.empty()) return;
  fs::create_directories(dir);
  io::save_safetensors((dir / optimizer_rank_file(group_->rank(), tp_file_rank())).string(), mine);
}

// This rank's own optimizer state, and rank 0's (which tells the rank count that saved it).
void Engine::load_optimizer_rank_state(const fs::path& d) {
  if (zero_) return;
  const auto read = [&](int r) {
    const fs::path f = d / optimizer_rank_file(r, tp_file_rank());
    return fs::exists(f) ? io::load_safetensors(f.string()) : std::map<std::string, Tensor>{};
  };
  NoGradGuard no_grad;
  optimizer_->load_rank_state(read(group_->rank()), read(0));
  // (It may hold this rank's own parameters: 0/1 Adam's between reconciliations.)
  if (!master_.empty()) sync_master_to_model();
}

RankCheckpointState Engine::training_state() {
  RankCheckpointState out;
  if (zero_) {
    gather_zero_state(*zero_, out.weights, out.optimizer);
    return out;
  }
  const auto named = model_.named_parameters();
  for (size_t i = 0; i < named.size(); ++i)
    out.weights[named[i].first] = master_.empty() ? *named[i].second : master_[i].second;
  out.optimizer = optimizer_->state_dict();
  return out;
}

void Engine::load_training_state(const std::map<std::string, Tensor>& weights,
                                 const std::map<std::string, Tensor>* optimizer_state,
                                 const std::string& checkpoint) {
  NoGradGuard no_grad;
  if (zero_) {
    zero_->load_full_state(weights, optimizer_state);
    return;
  }
  const auto named = model_.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    auto it = weights.find(named[i].first);
    if (it == weights.end()) continue;  // (a strict load has refused that before)
    Tensor& target = master_.empty() ? *named[i].second : master_[i].second;
    TS_CHECK(it->second.shape() == target.shape() && is_floating(it->second.dtype()),
             "load_checkpoint: '", checkpoint, "': '", named[i].first, "' is ",
             it->second.describe(), ", the model's parameter ", target.describe());
    target.copy_(it->second);
  }
  if (!master_.empty()) sync_master_to_model();
  if (optimizer_state) optimizer_->load_state_dict(*optimizer_state);
}

void Engine::restore_engine_state(const nlohmann::json& state, bool schedule) {
  const io::JsonFields meta(state, "load_checkpoint: engine.json");
  global_steps_ = meta.integer("global_steps", 0);
  // Checkpoints are taken at accumulation boundaries; the accumulation count may differ now
  // (another data-parallel size with the same global batch).
  micro_steps_ = global_steps_ * config_.gradient_accumulation_steps;
  skipped_steps_ = meta.integer("skipped_steps", 0, global_steps_);
  const int64_t saved_schedule_step = meta.integer("schedule_step", 0, global_steps_);
  if (schedule) schedule_step_ = saved_schedule_step;
  const io::JsonFields rng = meta.object("rng");
  default_generator().set_state({rng.unsigned_integer("seed"), rng.unsigned_integer("offset")});
  const io::JsonFields ls = meta.object("loss_scaler");
  const double scale = ls.number("scale");
  TS_CHECK(std::isfinite(scale) && scale > 0, ls.where(), ": 'scale' must be a positive number");
  scaler_.set_state({scale, ls.integer("cur_iter", 0), ls.integer("last_overflow_iter", -1),
                     ls.integer("cur_hysteresis", 0)});
}

}  // namespace tessera::engine
