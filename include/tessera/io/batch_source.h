// An endless stream of batches whose position can be saved and restored: what the Trainer
// draws micro-batches from (a RepeatingLoader over a DataLoader, or a sampler of random
// windows), and what makes a resumed run read exactly the batches a straight one does.
#pragma once
#include <nlohmann/json.hpp>

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
};

}  // namespace tessera::io
