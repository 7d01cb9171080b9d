// Which dataset indices a rank reads in an epoch, with torch.utils.data.DistributedSampler's
// rules: the epoch's order (shuffled with seed + epoch, or 0..n-1), cut to a multiple of the
// number of replicas (drop_last) or padded to one by repeating its start, then every
// num_replicas-th index from `rank`. The shuffle is Tessera's (a Fisher-Yates pass over Philox
// numbers, the same on every machine), not torch's permutation. (The DataLoader reads the
// padded order itself, giving each rank a contiguous slice of every global batch.)
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::io {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  int rank = 0;
  int num_replicas = 1;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, SamplerOptions options);
  // This rank's indices for `epoch` (num_samples() of them).
  std::vector<int64_t> indices(int64_t epoch) const;
  // Every rank's: the epoch's order cut or padded to num_samples() * num_replicas.
  std::vector<int64_t> order(int64_t epoch) const;
  // Per rank and epoch: ceil(n / R), or with drop_last floor(n / R) (torch's num_samples).
  int64_t num_samples() const { return num_samples_; }
  const SamplerOptions& options() const { return options_; }

 private:
  int64_t size_;
  SamplerOptions options_;
  int64_t num_samples_ = 0;
};

}  // namespace tessera::io
