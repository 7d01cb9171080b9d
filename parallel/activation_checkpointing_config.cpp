// DeepSpeed's "activation_checkpointing" section, read into the options ActivationCheckpointing
// takes and registered with io's config reader.
#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/activation_checkpointing.h"

namespace tessera::parallel {

void ActivationCheckpointingOptions::parse(io::config::Section& s,
                                           ActivationCheckpointingOptions& a) {
  a.enabled = true;
  s.notes({{"",
            "DeepSpeed's activation checkpointing: layers keep their inputs and rerun their "
            "forward in backward"},
           {"partition_activations", "each kept input split across the tensor-parallel group"},
           {"cpu_checkpointing", "kept inputs live in host memory"},
           {"contiguous_memory_optimization", "kept inputs copied into number_checkpoints buffers"},
           {"synchronize_checkpoint_boundary", "synchronise the device at each checkpoint (CUDA)"},
           {"profile", "time each checkpoint's forward and rerun"},
           {"number_checkpoints",
            "the checkpoints: groups of consecutive layers (0: null, checkpoint_num_layers "
            "decides)"},
           {"checkpoint_num_layers", "layers per checkpoint (Megatron's)"}});
  s.get("partition_activations", a.partition_activations);
  s.get("cpu_checkpointing", a.cpu_checkpointing);
  s.get("contiguous_memory_optimization", a.contiguous_memory_optimization);
  s.get("synchronize_checkpoint_boundary", a.synchronize_checkpoint_boundary);
  s.get("profile", a.profile);
  s.get_min<int64_t>("number_checkpoints", a.number_checkpoints, 1, "a positive integer or null");
  s.get_min<int64_t>("checkpoint_num_layers", a.checkpoint_num_layers, 1, "a positive integer");
  TS_CHECK(!a.contiguous_memory_optimization || a.number_checkpoints > 0, s.source(), ": '",
           s.key("contiguous_memory_optimization"),
           "' needs 'number_checkpoints' (how many buffers to allocate), as in DeepSpeed");
}

const ActivationCheckpointingOptions& activation_checkpointing_config(const io::TrainConfig& cfg) {
  return cfg.section<ActivationCheckpointingOptions>();
}

namespace {
const io::RegisterConfigSection<ActivationCheckpointingOptions> kActivationCheckpointingSection{
    "activation_checkpointing"};
}  // namespace

}  // namespace tessera::parallel
