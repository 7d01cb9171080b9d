// Determined's pytorch.PyTorchCallback: hooks the harness calls at the points of a trial's
// life, every one optional. A trial returns its callbacks by name from build_callbacks();
// each callback's state_dict() is saved in every checkpoint under that name and handed back
// to load_state_dict() when the trial resumes.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tessera::trial {

class PyTorchCallback {
 public:
  virtual ~PyTorchCallback() = default;
  // Before anything else; first_batch_idx is where training (re)starts, checkpoint_uuid the
  // checkpoint it resumes from (nullopt for a fresh trial).
  virtual void on_trial_startup(int64_t /*first_batch_idx*/,
                                const std::optional<std::string>& /*checkpoint_uuid*/) {}
  // Last, also when the trial ends with an error or a stop.
  virtual void on_trial_shutdown() {}
  // After the state is restored, before the first batch.
  virtual void on_training_start() {}
  virtual void on_training_epoch_start(int64_t /*epoch_idx*/) {}
  virtual void on_training_epoch_end(int64_t /*epoch_idx*/) {}
  // After each reporting period: the period's reduced metrics and every batch's.
  virtual void on_training_workload_end(const nlohmann::json& /*avg_metrics*/,
                                        const std::vector<nlohmann::json>& /*batch_metrics*/) {}
  virtual void on_validation_start() {}
  virtual void on_validation_epoch_start() {}
  // This slot's evaluate_batch outputs, before they are reduced.
  virtual void on_validation_epoch_end(const std::vector<nlohmann::json>& /*outputs*/) {}
  // The reduced validation metrics (the same on every slot).
  virtual void on_validation_end(const nlohmann::json& /*metrics*/) {}
  // The checkpoint's state (state.json) as loaded, before anything is restored from it.
  virtual void on_checkpoint_load_start(const nlohmann::json& /*checkpoint*/) {}
  // The checkpoint's state before it is written (chief only); entries added are saved.
  virtual void on_checkpoint_save_start(nlohmann::json& /*checkpoint*/) {}
  // The checkpoint directory, once everything is in it (every slot).
  virtual void on_checkpoint_write_end(const std::string& /*checkpoint_dir*/) {}
  virtual void on_checkpoint_upload_end(const std::string& /*uuid*/) {}
  virtual nlohmann::json state_dict() const { return nlohmann::json::object(); }
  virtual void load_state_dict(const nlohmann::json& /*state*/) {}
};

}  // namespace tessera::trial
