// DeepSpeed's "zero_optimization" section, owned here beside the ZeRO optimizer that carries
// it out: its keys, DeepSpeed's defaults (written once: ZeroOptions and GradBuckets take theirs
// from here) and its parser, registered with io's config reader (io/config_section_registry.h).
//
//   const parallel::ZeroConfig& z = parallel::zero_config(cfg);  // cfg: an io::TrainConfig
#pragma once
#include <cstdint>
#include <string>

#include "tessera/io/config_section.h"

namespace tessera::io {
struct TrainConfig;
}

namespace tessera::parallel {

struct ZeroConfig {
  int64_t stage = 0;
  std::string offload_optimizer_device = "none";  // offload_optimizer.device: cpu, nvme, none
  bool offload_pin_memory = false;                // offload_optimizer.pin_memory (DeepSpeed's)
  // offload_optimizer with device "nvme" (ZeRO-Infinity; DeepSpeed's defaults):
  std::string offload_nvme_path;     // where the swap files go
  int64_t offload_buffer_count = 4;  // swap transfers in flight
  bool offload_pipeline_read = false, offload_pipeline_write = false, offload_fast_init = false;
  // offload_param (stage 3): the parameter shards on the host ("cpu") or in swap files
  // ("nvme"; DeepSpeed's defaults).
  std::string offload_param_device = "none";
  std::string offload_param_nvme_path;
  int64_t offload_param_buffer_count = 5;
  int64_t offload_param_buffer_size = 100000000;  // elements per swap buffer
  int64_t offload_param_max_in_cpu = 1000000000;  // elements of shards kept in memory (nvme)
  bool offload_param_pin_memory = false;
  int64_t sub_group_size = 1000000000;        // elements the optimizer updates at once (nvme)
  int64_t reduce_bucket_size = 500000000;     // elements per gradient bucket
  int64_t allgather_bucket_size = 500000000;  // elements per all-gather of new parameters
  bool overlap_comm = true;  // DeepSpeed's default is false except at stage 3; ours overlaps
  int64_t stage3_param_persistence_threshold = 100000;
  int64_t stage3_prefetch_bucket_size = 50000000;
  int64_t stage3_max_live_parameters = 1000000000;
  int64_t stage3_max_reuse_distance = 1000000000;
  // Engine::save_16bit_model gathers ZeRO-3's parameters (DeepSpeed's default: false).
  bool stage3_gather_16bit_weights_on_model_save = false;
  // ZeRO++ (stage 3): int8 block-quantized parameter all-gathers (qwZ), the secondary
  // partition (hpZ) and int4 gradient all-to-alls (qgZ). LoCo and quantized non-trainable
  // weights are refused until they are built.
  bool zero_quantized_weights = false;
  bool zero_quantized_nontrainable_weights = false;
  int64_t zero_hpz_partition_size = 1;
  bool zero_quantized_gradients = false;

  // Reads the section (the config reader reports its unknown keys); errors name the key.
  static void parse(io::config::Section& z, ZeroConfig& out);
};

// The config's zero_optimization section (its defaults when the file has none).
const ZeroConfig& zero_config(const io::TrainConfig& cfg);

}  // namespace tessera::parallel
