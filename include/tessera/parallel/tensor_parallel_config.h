// DeepSpeed's "tensor_parallel" section, owned here beside the tensor-parallel layers:
// autotp_size ranks share each model replica (Megatron-style tensor parallelism of the models,
// adjacent ranks), the rest of the world is data parallel; sequence_parallel is Tessera's key
// (Megatron-SP). Registered with io's config reader (io/config_section_registry.h), which
// divides the job's ranks by autotp_size before it reads the batch triple.
//
//   const parallel::TensorParallelConfig& tp = parallel::tensor_parallel_config(cfg);
#pragma once
#include <cstdint>
#include <string>
#include <utility>

#include "tessera/io/config_section.h"

namespace tessera::io {
struct TrainConfig;
}

namespace tessera::parallel {

struct TensorParallelConfig {
  int64_t autotp_size = 1;
  bool sequence_parallel = false;

  static void parse(io::config::Section& s, TensorParallelConfig& out);
  // The ranks one model replica takes, and the key that states them.
  std::pair<std::string, int64_t> replica_ranks() const {
    return {"tensor_parallel.autotp_size", autotp_size};
  }
};

// The config's tensor_parallel section (its defaults when the file has none).
const TensorParallelConfig& tensor_parallel_config(const io::TrainConfig& cfg);

}  // namespace tessera::parallel
