#include "tessera/parallel/zero_config.h"

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"

namespace tessera::parallel {

namespace {

void parse_offload_param(io::config::Section& z, ZeroConfig& zc) {
  io::config::Section off = z.sub("offload_param");
  std::string& device = zc.offload_param_device;
  off.get("device", device);
  off.expect("device", device == "cpu" || device == "nvme" || device == "none", device,
             "\"cpu\", \"nvme\" or \"none\"");
  TS_CHECK(device == "none" || zc.stage == 3, z.source(),
           ": 'zero_optimization.offload_param' needs ZeRO stage 3 (it offloads the partitioned "
           "parameters), but 'zero_optimization.stage' is ",
           zc.stage);
  off.get("nvme_path", zc.offload_param_nvme_path);
  TS_CHECK(device != "nvme" || !zc.offload_param_nvme_path.empty(), z.source(),
           ": 'zero_optimization.offload_param.device' \"nvme\" needs "
           "'zero_optimization.offload_param.nvme_path' (the directory of the swap files)");
  off.get_min<int64_t>("buffer_count", zc.offload_param_buffer_count, 1, ">= 1");
  off.expect("buffer_count", zc.offload_param_buffer_count <= 1024, zc.offload_param_buffer_count,
             "at most 1024");
  off.get_min<int64_t>("buffer_size", zc.offload_param_buffer_size, 1, ">= 1");
  // (buffer_count x buffer_size elements of staging are allocated on use: bound it.)
  off.expect("buffer_size", zc.offload_param_buffer_size <= (int64_t{1} << 34),
             zc.offload_param_buffer_size, "at most 2^34 elements");
  off.get_min<int64_t>("max_in_cpu", zc.offload_param_max_in_cpu, 0, ">= 0");
  off.get("pin_memory", zc.offload_param_pin_memory);
  off.warn_unknown();
}

// ZeRO++'s keys: qwZ, hpZ and qgZ act; LoCo and quantized frozen weights are refused, naming
// the key, until they are built.
void parse_zeropp(io::config::Section& z, ZeroConfig& zc) {
  z.get("zero_quantized_weights", zc.zero_quantized_weights);
  TS_CHECK(!zc.zero_quantized_weights || zc.stage == 3, z.source(),
           ": 'zero_optimization.zero_quantized_weights' needs ZeRO stage 3 (it quantizes the "
           "parameter all-gathers), but 'zero_optimization.stage' is ",
           zc.stage);
  const char* not_built = " is not built in Tessera yet)";
  z.get("zero_quantized_nontrainable_weights", zc.zero_quantized_nontrainable_weights);
  z.expect("zero_quantized_nontrainable_weights", !zc.zero_quantized_nontrainable_weights,
           io::config::json(true),
           std::string("false (keeping frozen weights quantized") + not_built);
  z.get_min<int64_t>("zero_hpz_partition_size", zc.zero_hpz_partition_size, 1, ">= 1");
  z.expect("zero_hpz_partition_size", zc.zero_hpz_partition_size <= 1 << 20,
           zc.zero_hpz_partition_size, "at most 2^20 ranks");
  TS_CHECK(zc.zero_hpz_partition_size == 1 || zc.stage == 3, z.source(),
           ": 'zero_optimization.zero_hpz_partition_size' needs ZeRO stage 3 (it partitions the "
           "parameters a second time), but 'zero_optimization.stage' is ",
           zc.stage);
  z.get("zero_quantized_gradients", zc.zero_quantized_gradients);
  TS_CHECK(!zc.zero_quantized_gradients || zc.stage == 3, z.source(),
           ": 'zero_optimization.zero_quantized_gradients' needs ZeRO stage 3 (as DeepSpeed's "
           "qgZ), but 'zero_optimization.stage' is ",
           zc.stage);
  const io::config::json& loco = z.raw("zeropp_loco_param", "object or null");
  z.expect("zeropp_loco_param", loco.is_null(), loco,
           std::string("null (LoCo, error-compensated qgZ,") + not_built);
}

}  // namespace

void ZeroConfig::parse(io::config::Section& z, ZeroConfig& zc) {
  const std::string& source = z.source();
  z.notes({{"",
            "ZeRO: optimizer state, gradients and parameters partitioned over the "
            "data-parallel ranks"},
           {"stage",
            "1 partitions the optimizer state, 2 also the gradients, 3 also the "
            "parameters (0: off)"},
           {"offload_optimizer", "the optimizer's partition in host memory or on disk"},
           {"offload_optimizer.device",
            "where it lives: \"cpu\" (host memory) or \"nvme\" (a swap file under nvme_path)"},
           {"offload_optimizer.pin_memory", "pinned host memory (faster copies from a GPU)"},
           {"offload_optimizer.nvme_path", "nvme: the directory of the swap files"},
           {"offload_optimizer.buffer_count", "nvme: swap transfers (and their buffers) in flight"},
           {"offload_optimizer.pipeline_read",
            "nvme: read the next sub-group's state while this one updates, and the next "
            "step's first ones during the forward and backward"},
           {"offload_optimizer.pipeline_write",
            "nvme: let writes finish while the next sub-groups update, and the last ones "
            "during the next forward and backward"},
           {"offload_optimizer.fast_init",
            "nvme: make and write the state on the first step instead of at start"},
           {"offload_param",
            "stage 3: this rank's parameter shards in host memory or on disk (ZeRO-Infinity)"},
           {"offload_param.device",
            "\"cpu\" (host memory; on CPU ranks they are there already) or \"nvme\" (a swap "
            "file under nvme_path, read ahead of each gather)"},
           {"offload_param.nvme_path", "nvme: the directory of the swap files"},
           {"offload_param.buffer_count", "nvme: shards read ahead at once, at most"},
           {"offload_param.buffer_size", "nvme: elements of each read-ahead buffer"},
           {"offload_param.max_in_cpu",
            "nvme: elements of shards kept in memory (the first parameters), the rest on disk"},
           {"offload_param.pin_memory", "cpu: pinned host memory (faster copies to a GPU)"},
           {"sub_group_size", "elements the optimizer updates at once (nvme: swapped together)"},
           {"reduce_bucket_size", "elements per gradient reduction"},
           {"allgather_bucket_size", "elements per parameter all-gather (stages 1-2)"},
           {"overlap_comm", "reduce gradients during backward"},
           {"stage3_param_persistence_threshold",
            "stage 3: parameters this small stay whole on every rank"},
           {"stage3_prefetch_bucket_size", "stage 3: elements gathered ahead of use"},
           {"stage3_max_live_parameters",
            "stage 3: gathered elements at which gathering ahead of use stops"},
           {"stage3_max_reuse_distance",
            "stage 3: a parameter used again within this many elements stays gathered"},
           {"stage3_gather_16bit_weights_on_model_save",
            "stage 3: save_16bit_model gathers the whole weights (else it writes nothing)"},
           {"zero_quantized_weights",
            "stage 3 (ZeRO++ qwZ): parameters gathered as int8 blocks with a float32 scale per "
            "2048 elements, half of bf16's bytes"},
           {"zero_quantized_nontrainable_weights", "ZeRO++: not built (true is refused)"},
           {"zero_hpz_partition_size",
            "stage 3 (ZeRO++ hpZ): each parameter kept a second time, split over groups of this "
            "many consecutive ranks, so the gathers after its first of a step stay in the group "
            "(1: off; it must divide the ranks)"},
           {"zero_quantized_gradients",
            "stage 3 (ZeRO++ qgZ): gradients reduced by int4 all-to-alls inside and across "
            "nodes (consecutive blocks of the processes per host) instead of reduce-scattered; "
            "on one node they are reduce-scattered as without it (as DeepSpeed)"},
           {"zeropp_loco_param", "ZeRO++ LoCo: not built (a value is refused)"}});
  z.get("stage", zc.stage);
  z.expect("stage", zc.stage >= 0 && zc.stage <= 3, zc.stage, "0, 1, 2 or 3");
  if (z.has("offload_optimizer")) {
    io::config::Section off = z.sub("offload_optimizer");
    off.get("device", zc.offload_optimizer_device);
    const std::string& device = zc.offload_optimizer_device;
    off.expect("device", device == "cpu" || device == "nvme" || device == "none", device,
               "\"cpu\", \"nvme\" or \"none\"");
    TS_CHECK(zc.offload_optimizer_device == "none" || zc.stage >= 1, source,
             ": 'zero_optimization.offload_optimizer' needs ZeRO stage 1, 2 or 3 (the offloaded "
             "optimizer works on a rank's partition), but 'zero_optimization.stage' is 0");
    off.get("pin_memory", zc.offload_pin_memory);
    off.get("nvme_path", zc.offload_nvme_path);
    TS_CHECK(device != "nvme" || !zc.offload_nvme_path.empty(), source,
             ": 'zero_optimization.offload_optimizer.device' \"nvme\" needs "
             "'zero_optimization.offload_optimizer.nvme_path' (the directory of the swap files)");
    off.get_min<int64_t>("buffer_count", zc.offload_buffer_count, 1, ">= 1");
    off.expect("buffer_count", zc.offload_buffer_count <= 1024, zc.offload_buffer_count,
               "at most 1024");
    off.get("pipeline_read", zc.offload_pipeline_read);
    off.get("pipeline_write", zc.offload_pipeline_write);
    off.get("fast_init", zc.offload_fast_init);
    off.warn_unknown();
  }
  if (z.has("offload_param")) parse_offload_param(z, zc);
  z.get_min<int64_t>("reduce_bucket_size", zc.reduce_bucket_size, 1, ">= 1");
  z.get_min<int64_t>("allgather_bucket_size", zc.allgather_bucket_size, 1, ">= 1");
  z.get("overlap_comm", zc.overlap_comm);
  z.get_min<int64_t>("stage3_param_persistence_threshold", zc.stage3_param_persistence_threshold, 0,
                     ">= 0");
  z.get_min<int64_t>("stage3_prefetch_bucket_size", zc.stage3_prefetch_bucket_size, 0, ">= 0");
  z.ignored<bool>("contiguous_gradients", "gradients always go into contiguous bucket buffers");
  z.get_min<int64_t>("stage3_max_live_parameters", zc.stage3_max_live_parameters, 0, ">= 0");
  z.get_min<int64_t>("stage3_max_reuse_distance", zc.stage3_max_reuse_distance, 0, ">= 0");
  z.get_min<int64_t>("sub_group_size", zc.sub_group_size, 1, ">= 1");
  z.ignored<bool>("allgather_partitions", "partitions are always all-gathered");
  z.ignored<bool>("reduce_scatter", "gradients are always reduce-scattered at stages 1-3");
  z.get("stage3_gather_16bit_weights_on_model_save", zc.stage3_gather_16bit_weights_on_model_save);
  parse_zeropp(z, zc);
}

const ZeroConfig& zero_config(const io::TrainConfig& cfg) {
  return cfg.section<ZeroConfig>();
}

namespace {

// DeepSpeed's stage-0 FP16_Optimizer halves the scale on every overflow: its hysteresis keys
// act at stages 1-3 only.
void check_zero_and_fp16(io::TrainConfig& c) {
  TS_CHECK(!c.amp || zero_config(c).stage == 0, c.source,
           ": 'amp.enabled' with 'zero_optimization.stage' ", zero_config(c).stage,
           ": Amp and ZeRO are not compatible (as in DeepSpeed); use the fp16 section, which "
           "trains as amp's O2 does");
  if (c.fp16.enabled && zero_config(c).stage == 0 && c.fp16.hysteresis_stated)
    c.warnings.push_back(c.source +
                         ": 'fp16.hysteresis' has no effect at zero_optimization.stage 0 "
                         "(ignored): as DeepSpeed's stage-0 FP16_Optimizer, the scale halves on "
                         "every overflow; stages 1-3 apply it");
}

const io::RegisterConfigSection<ZeroConfig> kZeroSection{"zero_optimization", check_zero_and_fp16};

}  // namespace

}  // namespace tessera::parallel
