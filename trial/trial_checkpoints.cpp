// A trial's checkpoints: writing one (atomically: into <uuid>.tmp, renamed when complete,
// then the index), restoring the latest, and keeping only what checkpoint_storage asks for.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "harness_run.h"
#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/identity.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/safetensors.h"
#include "tessera/rng.h"
#include "tessera/trial/checkpoint_index.h"
#include "tessera/trial/metrics_report.h"

namespace tessera::trial {

namespace fs = std::filesystem;

namespace {

void write_json_atomically(const fs::path& path, const nlohmann::json& j) {
  io::write_file_atomically(path.string(), [&](std::ostream& out) { out << j.dump(1) << "\n"; });
}

// The checkpoints checkpoint_storage keeps: the latest, the save_trial_latest newest and the
// save_trial_best best by the searcher metric (of the validation at their batch).
std::set<std::string> kept(const std::vector<CheckpointIndexEntry>& list, const ExperimentConfig& c,
                           const std::string& latest) {
  std::vector<const CheckpointIndexEntry*> by_batch, by_metric;
  for (const auto& e : list) {
    by_batch.push_back(&e);
    if (e.searcher_metric) by_metric.push_back(&e);
  }
  using Entry = const CheckpointIndexEntry*;
  std::stable_sort(by_batch.begin(), by_batch.end(),
                   [](Entry a, Entry b) { return a->batches > b->batches; });
  const bool smaller = c.searcher.smaller_is_better;
  std::stable_sort(by_metric.begin(), by_metric.end(), [&](Entry a, Entry b) {
    const double x = *a->searcher_metric, y = *b->searcher_metric;
    return smaller ? x < y : x > y;
  });
  std::set<std::string> keep{latest};
  const auto& st = c.checkpoint_storage;
  for (size_t i = 0; i < by_batch.size() && static_cast<int64_t>(i) < st.save_trial_latest; ++i)
    keep.insert(by_batch[i]->uuid);
  for (size_t i = 0; i < by_metric.size() && static_cast<int64_t>(i) < st.save_trial_best; ++i)
    keep.insert(by_metric[i]->uuid);
  return keep;
}

}  // namespace

std::optional<std::string> TrialHarness::Run::find_latest() const {
  const CheckpointIndex index = CheckpointIndex::read(trial_dir);
  if (!index.latest) return std::nullopt;
  const std::string uuid = *index.latest;
  const fs::path dir = fs::path(trial_dir) / "checkpoints" / uuid;
  TS_CHECK(fs::is_directory(dir),
           io::quoted((fs::path(trial_dir) / CheckpointIndex::kFileName).string()),
           ": its latest checkpoint ", io::quoted(dir.string()), " is missing");
  return uuid;
}

void TrialHarness::Run::checkpoint() {
  state.last_ckpt = state.batches_trained;
  auto& group = context.group();
  std::string uuid = chief ? io::new_uuid() : std::string();
  if (context.distributed.size > 1) uuid = all_gather_strings(group, uuid).front();
  const fs::path final_dir = fs::path(trial_dir) / "checkpoints" / uuid;
  const fs::path tmp = final_dir.string() + ".tmp";
  if (chief) {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  }
  if (context.distributed.size > 1) group.barrier();

  auto* ds = dynamic_cast<DeepSpeedTrialContext*>(&context);
  if (ds) {
    for (size_t i = 0; i < ds->engines().size(); ++i)  // collective
      ds->engines()[i]->save_checkpoint(tmp.string(), "model" + std::to_string(i), {}, false);
  } else if (chief) {
    for (size_t i = 0; i < context.models().size(); ++i)
      io::save_safetensors((tmp / ("model" + std::to_string(i) + ".safetensors")).string(),
                           context.models()[i]->state_dict());
    for (size_t i = 0; i < context.optimizers().size(); ++i)
      io::save_safetensors((tmp / ("optimizer" + std::to_string(i) + ".safetensors")).string(),
                           context.optimizers()[i]->state_dict());
  }
  if (chief) {
    nlohmann::json schedulers = nlohmann::json::array();
    for (const auto& s : context.schedulers_) schedulers.push_back(s.scheduler->state_dict());
    const GeneratorState rng = default_generator().state();
    nlohmann::json ckpt = {
        {"format", "tessera-trial-1"},
        {"trial_type", ds ? "DeepSpeedTrial" : "PyTorchTrial"},
        {"experiment", context.get_experiment_config().name},
        {"experiment_uuid", context.info().experiment_uuid},
        {"config_sha256", context.get_experiment_config().sha256},
        {"trial_id", context.get_trial_id()},
        {"hparams", context.get_hparams()},
        {"batches_trained", state.batches_trained},
        {"epochs_trained", state.epochs_trained},
        {"last_val", state.last_val},
        {"best_validation",
         state.best_validation ? nlohmann::json(*state.best_validation) : nlohmann::json()},
        {"last_validation", last_validation},
        {"data", runner.data_state()},
        {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
        {"lr_schedulers", schedulers},
        {"callbacks", nlohmann::json::object()}};
    for (auto& [name, cb] : runner.callbacks()) ckpt["callbacks"][name] = cb->state_dict();
    for (auto& [name, cb] : runner.callbacks()) cb->on_checkpoint_save_start(ckpt);
    runner.save_user_state(tmp.string());
    write_json_atomically(tmp / "state.json", ckpt);
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);

    CheckpointIndex index = CheckpointIndex::read(trial_dir);
    const auto& metric = context.get_experiment_config().searcher.metric;
    const bool validated = validation_current() && last_validation.contains(metric) &&
                           last_validation[metric].is_number();
    index.checkpoints.push_back(
        {uuid, state.batches_trained,
         validated ? std::optional<double>(last_validation[metric].get<double>()) : std::nullopt});
    index.latest = uuid;
    const std::set<std::string> keep =
        kept(index.checkpoints, context.get_experiment_config(), uuid);
    std::vector<std::string> dropped;
    for (const auto& e : index.checkpoints)
      if (!keep.count(e.uuid)) dropped.push_back(e.uuid);
    for (const auto& d : dropped) index.remove(d);
    index.write(trial_dir);  // the new latest is loadable from here on
    for (const auto& d : dropped) fs::remove_all(fs::path(trial_dir) / "checkpoints" / d);
  }
  if (context.distributed.size > 1) group.barrier();
  latest_checkpoint = final_dir.string();
  for (auto& [name, cb] : runner.callbacks()) cb->on_checkpoint_write_end(final_dir.string());
  for (auto& [name, cb] : runner.callbacks()) cb->on_checkpoint_upload_end(uuid);
  log("checkpoint " + uuid + " at batch " + std::to_string(state.batches_trained));
}

// A checkpoint resumes only the trial that wrote it: the same experiment (its UUID; "" for a
// trial run on its own) and the same hyperparameters. A changed experiment file (a longer
// searcher.max_length, say) is allowed, with a warning.
void TrialHarness::Run::check_identity(const nlohmann::json& ckpt, const std::string& where) const {
  const std::string mine = context.info().experiment_uuid;
  const std::string saved = ckpt.value("experiment_uuid", std::string());
  auto shown = [](const std::string& u) { return u.empty() ? std::string("none") : u; };
  TS_CHECK(saved == mine, where, " belongs to another experiment (its UUID ", shown(saved),
           ", this trial's ", shown(mine), "): not resumed. Give this run its own ",
           "checkpoint_storage.host_path (or --trial-dir), or remove ", io::quoted(trial_dir));
  const nlohmann::json hparams(context.get_hparams());
  TS_CHECK(ckpt.contains("hparams") && ckpt["hparams"] == hparams, where,
           " was trained with other hyperparameters: the checkpoint's ",
           ckpt.value("hparams", nlohmann::json()).dump(), ", this trial's ", hparams.dump(),
           ". A trial resumes only its own checkpoints: use another --trial-id (or "
           "checkpoint_storage.host_path), or remove ",
           io::quoted(trial_dir));
  const std::string sha = ckpt.value("config_sha256", std::string());
  if (chief && sha != context.get_experiment_config().sha256)
    std::cerr << "warning: " << where << " was written under another version of the experiment "
              << "file (sha256 " << (sha.empty() ? "unknown" : sha.substr(0, 12)) << ", now "
              << context.get_experiment_config().sha256.substr(0, 12) << "); resuming\n";
}

void TrialHarness::Run::load(const std::string& uuid) {
  const fs::path dir = fs::path(trial_dir) / "checkpoints" / uuid;
  const std::string where = io::quoted((dir / "state.json").string());
  const nlohmann::json ckpt = io::JsonFields::parse_file((dir / "state.json").string());
  const io::JsonFields f(ckpt, where);
  for (auto& [name, cb] : runner.callbacks()) cb->on_checkpoint_load_start(ckpt);

  check_identity(ckpt, where);
  auto* ds = dynamic_cast<DeepSpeedTrialContext*>(&context);
  const std::string type = f.string("trial_type");
  TS_CHECK(type == (ds ? "DeepSpeedTrial" : "PyTorchTrial"), where, ": a ", type,
           " checkpoint cannot resume a ", ds ? "DeepSpeedTrial" : "PyTorchTrial");
  if (ds) {
    for (size_t i = 0; i < ds->engines().size(); ++i)
      ds->engines()[i]->load_checkpoint(dir.string(), "model" + std::to_string(i));
  } else {
    for (size_t i = 0; i < context.models().size(); ++i)
      context.models()[i]->load_state_dict(
          io::load_safetensors((dir / ("model" + std::to_string(i) + ".safetensors")).string()));
    for (size_t i = 0; i < context.optimizers().size(); ++i)
      context.optimizers()[i]->load_state_dict(io::load_safetensors(
          (dir / ("optimizer" + std::to_string(i) + ".safetensors")).string()));
  }
  const nlohmann::json& schedulers = f.array("lr_schedulers");
  TS_CHECK(schedulers.size() == context.schedulers_.size(), where, ": ", schedulers.size(),
           " lr schedulers saved, the trial wraps ", context.schedulers_.size());
  for (size_t i = 0; i < schedulers.size(); ++i)
    context.schedulers_[i].scheduler->load_state_dict(schedulers[i]);
  const io::JsonFields callbacks = f.object("callbacks");
  for (auto& [name, cb] : runner.callbacks()) {
    if (callbacks.has(name))
      cb->load_state_dict(ckpt["callbacks"][name]);
    else if (chief)
      std::cerr << "warning: " << where << " has no state for callback '" << name << "'\n";
  }
  const io::JsonFields rng = f.object("rng");
  default_generator().set_state({rng.unsigned_integer("seed"), rng.unsigned_integer("offset")});
  runner.set_data_state(ckpt.at("data"));
  state.batches_trained = f.integer("batches_trained", 0);
  state.epochs_trained = f.integer("epochs_trained", 0);
  state.last_val = f.integer("last_val");
  state.last_ckpt = state.batches_trained;
  if (state.batches_trained > 0) context.current_batch_idx_ = state.batches_trained - 1;
  if (ckpt.at("best_validation").is_number())
    state.best_validation = ckpt["best_validation"].get<double>();
  last_validation = ckpt.value("last_validation", nlohmann::json::object());
  latest_checkpoint = dir.string();
  runner.load_user_state(dir.string());
  if (chief) MetricsReport::truncate(trial_dir, state.batches_trained);
}

}  // namespace tessera::trial
