// Batches of a Dataset (torch.utils.data.DataLoader with DeepSpeed's DistributedSampler):
//
//   io::DataLoader<Pair, Rows> loader(dataset, {.batch_size = 32, .shuffle = true, .seed = 1,
//                                              .rank = r, .world_size = n}, collate);
//   while (auto batch = loader.next()) ...;   // one epoch; the next call starts the next one
//   io::RepeatingLoader<Pair, Rows> forever(std::move(loader));  // DeepSpeed's RepeatingLoader
//
// The epoch's order is DistributedSampler's (shuffled with seed + epoch, cut or padded to a
// multiple of the ranks); each global batch (batch_size * world_size items of it) is split
// into contiguous per-rank slices, so N ranks together read, row for row, the batches one
// process with an N times larger batch reads (and dropout masks match, see rng.h); batches per
// rank and epoch are torch's len(DataLoader). drop_last drops both the indices that do not
// split evenly over ranks and a last incomplete batch. The position (epoch, batch) is saved and
// restored with state() / set_state(), so a run resumes mid-epoch on the batch it would have read
// next.
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

#include "tessera/error.h"
#include "tessera/io/batch_source.h"
#include "tessera/io/dataset.h"
#include "tessera/io/distributed_sampler.h"
#include "tessera/io/json_fields.h"

namespace tessera::io {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;  // torch's DataLoader default
  uint64_t seed = 0;     // the shuffle's, epoch e uses seed + e
  int rank = 0;
  int world_size = 1;
  bool drop_last = false;
};

template <class Item, class Batch = std::vector<Item>>
class DataLoader {
 public:
  using Collate = std::function<Batch(std::vector<Item>)>;

  // collate: items -> batch; may be left empty when Batch is std::vector<Item>.
  DataLoader(std::shared_ptr<const Dataset<Item>> dataset, DataLoaderOptions options,
             Collate collate = {})
      : dataset_(std::move(dataset)),
        options_(options),
        collate_(std::move(collate)),
        sampler_(dataset_ ? dataset_->size() : 0, {options.shuffle, options.seed, options.rank,
                                                   options.world_size, options.drop_last}) {
    TS_CHECK(dataset_, "DataLoader: no dataset");
    TS_CHECK(options.batch_size >= 1, "DataLoader: batch_size ", options.batch_size, " < 1");
    if constexpr (!std::is_same_v<Batch, std::vector<Item>>)
      TS_CHECK(collate_, "DataLoader: a collate function is needed to make batches");
  }

  // Batches per epoch on this rank (len(loader)).
  int64_t size() const {
    const int64_t n = sampler_.num_samples(), b = options_.batch_size;
    return options_.drop_last ? n / b : (n + b - 1) / b;
  }
  int64_t epoch() const { return epoch_; }
  int64_t batch_index() const { return batch_; }  // within the epoch

  // The next batch of this epoch; nullopt once the epoch is over (the call after starts the
  // next epoch).
  std::optional<Batch> next() {
    if (batch_ >= size()) {
      ++epoch_;
      batch_ = 0;
      order_.reset();
      return std::nullopt;
    }
    if (!order_) order_ = sampler_.order(epoch_);
    // Global batch `batch_`: a full one gives each rank batch_size items; the last, shorter
    // one (no drop_last) an equal share of what is left (a multiple of the ranks).
    const int64_t world = options_.world_size, b = options_.batch_size;
    const int64_t start = batch_ * b * world;
    const int64_t left = static_cast<int64_t>(order_->size()) - start;
    const int64_t share = std::min(b, left / world);
    const int64_t first = start + options_.rank * share;
    std::vector<Item> items;
    items.reserve(static_cast<size_t>(share));
    for (int64_t i = first; i < first + share; ++i)
      items.push_back(dataset_->get((*order_)[static_cast<size_t>(i)]));
    ++batch_;
    if constexpr (std::is_same_v<Batch, std::vector<Item>>)
      if (!collate_) return items;
    return collate_(std::move(items));
  }

  nlohmann::json state() const { return {{"epoch", epoch_}, {"batch", batch_}}; }
  void set_state(const nlohmann::json& state) {
    const JsonFields f(state, "DataLoader state");
    const int64_t epoch = f.integer("epoch"), batch = f.integer("batch");
    TS_CHECK(epoch >= 0 && batch >= 0 && batch <= size(), "DataLoader state: batch ", batch,
             " of epoch ", epoch, " does not fit ", size(), " batches per epoch");
    epoch_ = epoch;
    batch_ = batch;
    order_.reset();
  }

 private:
  std::shared_ptr<const Dataset<Item>> dataset_;
  DataLoaderOptions options_;
  Collate collate_;
  DistributedSampler sampler_;
  int64_t epoch_ = 0, batch_ = 0;
  std::optional<std::vector<int64_t>> order_;  // this epoch's indices, made on first use
};

// DeepSpeed's RepeatingLoader: the loader's batches epoch after epoch, without end.
template <class Item, class Batch = std::vector<Item>>
class RepeatingLoader : public BatchSource<Batch> {
 public:
  explicit RepeatingLoader(DataLoader<Item, Batch> loader) : loader_(std::move(loader)) {
    TS_CHECK(loader_.size() > 0,
             "RepeatingLoader: the data loader yields no batches (too few items for its "
             "batch_size and ranks, with drop_last)");
  }
  Batch next() override {
    if (auto b = loader_.next()) return std::move(*b);
    return *loader_.next();
  }
  nlohmann::json state() const override { return loader_.state(); }
  void set_state(const nlohmann::json& state) override { loader_.set_state(state); }
  std::optional<int64_t> epoch_batches() const override { return loader_.size(); }
  const DataLoader<Item, Batch>& loader() const { return loader_; }

 private:
  DataLoader<Item, Batch> loader_;
};

}  // namespace tessera::io
