// Tessera's "moe" config section: the built-in models' MLPs as DeepSpeed MoE layers
// (parallel/moe.h). DeepSpeed has MoE only as a Python API; the keys are its MoE class's
// arguments plus Megatron-DeepSpeed's placement (expert_interval) and loss coefficient:
//
//   "moe": {"num_experts": 8, "ep_size": 2, "k": 2, "expert_interval": 2,
//           "capacity_factor": 1.0, "aux_loss_coef": 0.01}
//
// num_experts may be a list, one count per MoE layer (PR-MoE's pyramid).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tessera/parallel/moe.h"

namespace tessera::io {
struct TrainConfig;
namespace config {
class Section;
}
}  // namespace tessera::io

namespace tessera::models {

struct MoELayout {
  std::vector<int64_t> num_experts;  // per MoE layer, or one count for all
  int64_t expert_interval = 2;       // layer l (from 0) is MoE when (l + 1) % interval == 0
  int64_t ep_size = 1;
  double aux_loss_coef = 0.01;   // l_aux's weight in the training loss (summed over layers)
  parallel::MoEOptions options;  // the gate's and the layer's (num_experts per layer)

  bool is_moe_layer(int64_t layer) const { return (layer + 1) % expert_interval == 0; }
  int64_t moe_layers(int64_t n_layer) const { return n_layer / expert_interval; }
  // The options of MoE layer `layer` (its expert count).
  parallel::MoEOptions layer_options(int64_t layer) const;
  // Errors name the section's keys: counts per layer that do not match n_layer's MoE layers,
  // expert counts ep_size does not divide.
  void validate(int64_t n_layer, const std::string& section = "moe") const;
  std::string to_json() const;  // kept in the model's config.json ("tessera_moe")
  static MoELayout from_json(const std::string& text);
};

struct MoEConfig {
  bool stated = false;
  MoELayout layout;
  static void parse(io::config::Section& s, MoEConfig& out);
};

// The section's layout when it is stated; none otherwise.
std::optional<MoELayout> moe_of(const io::TrainConfig& cfg);

}  // namespace tessera::models
