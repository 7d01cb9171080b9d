#include "tessera/parallel/tensor_parallel_config.h"

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"

namespace tessera::parallel {

void TensorParallelConfig::parse(io::config::Section& s, TensorParallelConfig& out) {
  s.notes({{"", "Megatron-style tensor parallelism of the models' layers"},
           {"autotp_size", "ranks that share each model replica (adjacent ranks)"},
           {"sequence_parallel",
            "Tessera's: norms and dropout work on a slice of the sequence per rank"}});
  s.get_min<int64_t>("autotp_size", out.autotp_size, 1, "a positive integer");
  s.get("sequence_parallel", out.sequence_parallel);
}

const TensorParallelConfig& tensor_parallel_config(const io::TrainConfig& cfg) {
  return cfg.section<TensorParallelConfig>();
}

namespace {
const io::RegisterConfigSection<TensorParallelConfig> kTensorParallelSection{"tensor_parallel"};
}  // namespace

}  // namespace tessera::parallel
