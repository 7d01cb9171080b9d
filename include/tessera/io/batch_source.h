// An endless stream of batches whose position can be saved and restored: what the Trainer
// draws micro-batches from (a RepeatingLoader over a DataLoader, or a sampler of random
// windows), and what makes a resumed run read exactly the batches a straight one does.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

namespace tessera::io {

template <class Batch>
class BatchSource {
 public:
  using batch_type = Batch;
  virtual ~BatchSource() = default;
  virtual Batch next() = 0;
  // The position, saved in checkpoints' client_state ("data").
  virtual nlohmann::json state() const = 0;
  // Restores a position state() returned; errors name what does not fit.
  virtual void set_state(const nlohmann::json& state) = 0;
  // Batches in one pass over the data, for a source that has epochs (a RepeatingLoader);
  // none for one that samples without end.
  virtual std::optional<int64_t> epoch_batches() const { return std::nullopt; }
};

}  // namespace tessera::io
