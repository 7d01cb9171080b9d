// ZeroOptions from the config: the one place the zero_optimization keys become the options the
// run's ZeroOptimizer and estimate-memory's figures both use.
#include "tessera/io/async_file_io.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/zero_optimizer.h"

namespace tessera::parallel {

namespace {

std::optional<NvmeOffloadOptions> optimizer_nvme(const io::TrainConfig& c, const ZeroConfig& z) {
  if (z.offload_optimizer_device != "nvme") return std::nullopt;
  NvmeOffloadOptions n;
  n.nvme_path = z.offload_nvme_path;
  n.buffer_count = z.offload_buffer_count;
  n.pipeline_read = z.offload_pipeline_read;
  n.pipeline_write = z.offload_pipeline_write;
  n.fast_init = z.offload_fast_init;
  n.sub_group_size = z.sub_group_size;
  n.aio = io::aio_config(c);
  return n;
}

std::optional<NvmeOffloadOptions> param_nvme(const io::TrainConfig& c, const ZeroConfig& z) {
  if (z.offload_param_device != "nvme") return std::nullopt;
  NvmeOffloadOptions n;
  n.nvme_path = z.offload_param_nvme_path;
  n.buffer_count = z.offload_param_buffer_count;
  n.buffer_numel = z.offload_param_buffer_size;
  n.aio = io::aio_config(c);
  n.path_key = "zero_optimization.offload_param.nvme_path";
  n.buffer_count_key = "zero_optimization.offload_param.buffer_count";
  return n;
}

}  // namespace

ZeroOptions zero_options(const io::TrainConfig& c) {
  const ZeroConfig& z = zero_config(c);
  ZeroOptions zo;
  zo.stage = static_cast<int>(z.stage);
  zo.reduce_bucket_size = z.reduce_bucket_size;
  zo.allgather_bucket_size = z.allgather_bucket_size;
  zo.overlap_comm = z.overlap_comm;
  zo.param_persistence_threshold = z.stage3_param_persistence_threshold;
  zo.prefetch_bucket_size = z.stage3_prefetch_bucket_size;
  zo.max_live_parameters = z.stage3_max_live_parameters;
  zo.max_reuse_distance = z.stage3_max_reuse_distance;
  zo.offload_optimizer = z.offload_optimizer_device != "none";
  zo.nvme = optimizer_nvme(c, z);
  zo.pin_memory = zo.offload_optimizer && z.offload_pin_memory;
  zo.offload_param = z.offload_param_device;
  zo.param_nvme = param_nvme(c, z);
  zo.param_pin_memory = z.offload_param_pin_memory;
  zo.param_max_in_cpu = z.offload_param_max_in_cpu;
  zo.quantized_weights = z.zero_quantized_weights;
  zo.hpz_partition_size = z.zero_hpz_partition_size;
  zo.quantized_gradients = z.zero_quantized_gradients;
  return zo;
}

}  // namespace tessera::parallel
