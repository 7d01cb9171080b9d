#include "tessera/io/distributed_sampler.h"

#include <numeric>

#include "tessera/error.h"
#include "tessera/rng.h"

namespace tessera::io {

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : size_(dataset_size), options_(options) {
  TS_CHECK(dataset_size >= 0, "DistributedSampler: dataset size ", dataset_size, " < 0");
  TS_CHECK(options.num_replicas >= 1 && options.rank >= 0 && options.rank < options.num_replicas,
           "DistributedSampler: rank ", options.rank, " of ", options.num_replicas,
           " replicas (need 0 <= rank < num_replicas)");
  const int64_t r = options.num_replicas;
  num_samples_ = options.drop_last ? size_ / r : (size_ + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  const std::vector<int64_t> all = order(epoch);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (size_t i = static_cast<size_t>(options_.rank); i < all.size();
       i += static_cast<size_t>(options_.num_replicas))
    mine.push_back(all[i]);
  return mine;
}

std::vector<int64_t> DistributedSampler::order(int64_t epoch) const {
  TS_CHECK(epoch >= 0, "DistributedSampler: epoch ", epoch, " < 0");
  std::vector<int64_t> order(static_cast<size_t>(size_));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options_.shuffle) {
    // Fisher-Yates from the back; draw i picks the swap partner of position i.
    const uint64_t key = options_.seed + static_cast<uint64_t>(epoch);
    for (int64_t i = size_ - 1; i > 0; --i) {
      const double u = philox_uniform_f64(key, static_cast<uint64_t>(i));
      const int64_t j = std::min<int64_t>(i, static_cast<int64_t>(u * static_cast<double>(i + 1)));
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
  }
  const int64_t r = options_.num_replicas, total = num_samples_ * r;
  if (total <= size_) {
    order.resize(static_cast<size_t>(total));
  } else if (size_ > 0) {
    // Pad by repeating the order from its start (as often as needed), as torch does.
    for (int64_t i = size_; i < total; ++i) order.push_back(order[static_cast<size_t>(i % size_)]);
  }
  return order;
}

}  // namespace tessera::io
