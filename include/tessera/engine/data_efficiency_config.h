// DeepSpeed's "data_efficiency" section. Its data_routing.random_ltd part is built
// (nn/random_ltd.h): the engine builds the token-drop state from it
// (Engine::random_layer_token_drop()) and launch gives it to the built-in models. Its
// data_sampling part (data_sampling_config.h) is the metric-based curriculum sampler that
// launch's training batches follow; its dynamic batching is not built (true is an error).
//
//   "data_efficiency": {"enabled": true, "seed": 1234, "data_routing": {"enabled": true,
//     "random_ltd": {"enabled": true, "total_layer_num": 12, "random_ltd_layer_num": 10,
//       "random_ltd_layer_id": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "model_mask_name":
//       "attention_mask", "model_type": "decoder", "hidden_state_order": "batch_seq_dim",
//       "random_ltd_schedule": {"min_value": 128, "max_value": 2048, "schedule_type":
//         "fixed_linear", "schedule_config": {"require_steps": 200000, "seq_per_step": 16}}}}}
#pragma once
#include <string>

#include "tessera/engine/data_sampling_config.h"
#include "tessera/io/config_section.h"
#include "tessera/nn/random_ltd.h"

namespace tessera::io {
struct TrainConfig;
}

namespace tessera::engine {

struct DataEfficiencyConfig {
  bool enabled = false;
  int64_t seed = 1234;      // DeepSpeed's default; the sampler's and random-LTD's draws' seed
  bool random_ltd = false;  // data_routing.random_ltd.enabled (DeepSpeed reads it alone)
  int64_t total_layer_num = 0;
  std::string model_type;  // "encoder" (BERT) or "decoder" (GPT-2)
  nn::RandomLtdOptions random_ltd_options;
  DataSamplingConfig data_sampling;

  static void parse(io::config::Section& s, DataEfficiencyConfig& out);
};

const DataEfficiencyConfig& data_efficiency_config(const io::TrainConfig& cfg);

}  // namespace tessera::engine
