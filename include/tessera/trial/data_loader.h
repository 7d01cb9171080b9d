// Determined's pytorch.DataLoader: a trial describes its loader (dataset, per-slot batch
// size, shuffling, collate) and the harness builds one per slot, handing each slot its slice
// of every global batch (io::DataLoader's sharding: N slots read, row for row, what one slot
// with an N times larger batch reads).
//
//   trial::DataLoader<Rows> build_training_data_loader() override {
//     return {dataset_, {.batch_size = context.get_per_slot_batch_size(), .shuffle = true},
//             collate};
//   }
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "tessera/error.h"
#include "tessera/io/data_loader.h"

namespace tessera::trial {

// One slot's loader: batches epoch by epoch, with a position saved in checkpoints.
template <class Batch>
class SlotLoader {
 public:
  virtual ~SlotLoader() = default;
  virtual int64_t size() const = 0;          // batches per epoch on this slot (len(loader))
  virtual std::optional<Batch> next() = 0;   // nullopt at the end of an epoch
  virtual nlohmann::json state() const = 0;  // the position (epoch, batch)
  virtual void set_state(const nlohmann::json& state) = 0;
};

template <class Batch>
class DataLoader {
 public:
  // options.rank and options.world_size are the harness's to set: they are replaced.
  template <class Item>
  DataLoader(std::shared_ptr<const io::Dataset<Item>> dataset, io::DataLoaderOptions options,
             typename io::DataLoader<Item, Batch>::Collate collate = {}) {
    TS_CHECK(dataset, "trial::DataLoader: no dataset");
    make_ = [dataset = std::move(dataset), options, collate = std::move(collate)](int rank,
                                                                                  int world) {
      io::DataLoaderOptions o = options;
      o.rank = rank;
      o.world_size = world;
      std::unique_ptr<SlotLoader<Batch>> slot =
          std::make_unique<Slot<Item>>(io::DataLoader<Item, Batch>(dataset, o, collate));
      return slot;
    };
  }
  template <class Item>
  DataLoader(std::shared_ptr<io::Dataset<Item>> dataset, io::DataLoaderOptions options,
             typename io::DataLoader<Item, Batch>::Collate collate = {})
      : DataLoader(std::shared_ptr<const io::Dataset<Item>>(std::move(dataset)), options,
                   std::move(collate)) {}

  // A loader of the caller's own making for slot (rank, world).
  using Make = std::function<std::unique_ptr<SlotLoader<Batch>>(int rank, int world)>;
  explicit DataLoader(Make make) : make_(std::move(make)) {
    TS_CHECK(make_, "trial::DataLoader: no loader factory");
  }

  // Slot `rank` of `world`'s loader.
  std::unique_ptr<SlotLoader<Batch>> build(int rank, int world) const { return make_(rank, world); }

 private:
  template <class Item>
  class Slot : public SlotLoader<Batch> {
   public:
    explicit Slot(io::DataLoader<Item, Batch> loader) : loader_(std::move(loader)) {}
    int64_t size() const override { return loader_.size(); }
    std::optional<Batch> next() override { return loader_.next(); }
    nlohmann::json state() const override { return loader_.state(); }
    void set_state(const nlohmann::json& state) override { loader_.set_state(state); }

   private:
    io::DataLoader<Item, Batch> loader_;
  };
  Make make_;
};

// What DeepSpeedTrial's train_batch and evaluate_batch pull micro-batches from (Determined's
// dataloader_iter): training continues across epochs; validation ends with its loader.
template <class Batch>
class DataLoaderIterator {
 public:
  DataLoaderIterator(SlotLoader<Batch>* loader, bool repeat) : loader_(loader), repeat_(repeat) {}
  virtual ~DataLoaderIterator() = default;
  // The next micro-batch; an error when there is none (a slot that built no loader, or the
  // end of the validation data).
  virtual Batch next() {
    TS_CHECK(loader_,
             "DeepSpeedTrial: this slot built no data loader (set_mpu's "
             "should_build_data_loader is false) but train_batch/evaluate_batch asked "
             "for a batch");
    if (auto b = loader_->next()) return std::move(*b);
    TS_CHECK(repeat_,
             "DeepSpeedTrial: evaluate_batch asked for more micro-batches than the "
             "validation data loader has");
    auto b = loader_->next();
    TS_CHECK(b, "DeepSpeedTrial: the training data loader yields no batches");
    return std::move(*b);
  }

 private:
  SlotLoader<Batch>* loader_;  // not owned; null on a slot without data
  bool repeat_;
};

}  // namespace tessera::trial
