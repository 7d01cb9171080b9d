// A random-access dataset (torch.utils.data.Dataset): size() items, item i by get(i). The
// DataLoader batches it; a user's data implements it for the Trainer.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace tessera::io {

template <class Item>
class Dataset {
 public:
  using item_type = Item;
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Item `index`, 0 <= index < size(); the same index gives the same item every time (so a
  // resumed run reads what a straight one does).
  virtual Item get(int64_t index) const = 0;
};

// A dataset over a function of the index (for data computed or held elsewhere).
template <class Item>
class FunctionDataset : public Dataset<Item> {
 public:
  FunctionDataset(int64_t size, std::function<Item(int64_t)> get)
      : size_(size), get_(std::move(get)) {}
  int64_t size() const override { return size_; }
  Item get(int64_t index) const override { return get_(index); }

 private:
  int64_t size_;
  std::function<Item(int64_t)> get_;
};

}  // namespace tessera::io
