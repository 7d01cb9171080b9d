// Counter-based random numbers (Philox 4x32-10): element i of a draw depends only on
// (seed, offset + i), so CPU and CUDA produce the same numbers for the same seed.
#pragma once
#include <array>
#include <cstdint>
#include <mutex>

namespace tessera {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Uniform in [0, 1) and standard normal for the element at `index` of a stream.
float philox_uniform(uint64_t seed, uint64_t index);
float philox_normal(uint64_t seed, uint64_t index);
double philox_uniform_f64(uint64_t seed, uint64_t index);
double philox_normal_f64(uint64_t seed, uint64_t index);
// Dropout's stream: four numbers per Philox draw (word index % 4 of draw index / 4, in a
// counter space of its own). dropout keeps element i when this, at offset + i, is >= p.
float philox_packed_uniform(uint64_t seed, uint64_t index);

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// A seed plus a running offset; each draw of n numbers reserves n counters.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : state_{seed, 0} {}
  void manual_seed(uint64_t seed);
  GeneratorState state() const;
  void set_state(GeneratorState state);
  // Returns the state to draw `n` numbers from and advances past them.
  GeneratorState reserve(uint64_t n);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

// Data parallelism: this process is rank `rank` of `world`, each holding the next block of
// rows of one global batch. Dropout then reserves counters for the whole global batch and
// uses its own slice, so N ranks apply exactly the masks one process applies to the global
// batch (for batch-major activations, which every built-in model uses). Default: 0 of 1.
struct DataParallelShard {
  int rank = 0, world = 1;
};
// Checks 0 <= rank < world (naming both) and returns the pair.
DataParallelShard make_data_parallel_shard(int rank, int world);
void set_data_parallel_shard(int rank, int world);
DataParallelShard data_parallel_shard();

// Sequence parallelism: activations [batch, sequence, ...] of which this process holds chunk
// `rank` of `world` along the sequence (dim 1). Inside a SequenceShardGuard, dropout reserves
// counters for the whole sequence (and the whole global batch) and uses this chunk's, so the
// ranks apply exactly the masks one process applies to the whole activation. Default: 0 of 1.
struct SequenceShard {
  int rank = 0, world = 1;
};
SequenceShard sequence_shard();
class SequenceShardGuard {
 public:
  SequenceShardGuard(int rank, int world);  // checks 0 <= rank < world
  ~SequenceShardGuard();
  SequenceShardGuard(const SequenceShardGuard&) = delete;
  SequenceShardGuard& operator=(const SequenceShardGuard&) = delete;

 private:
  SequenceShard previous_;
};

// The process-wide default generator, used when an op is given none (torch.manual_seed).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace tessera
