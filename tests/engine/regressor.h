// A user's own model and batch type (not a built-in one) for the engine's client-side API:
// y ~ x W^T + b with 3 inputs, the mean squared error over a batch's rows. Its gradients have
// a closed form, computed here in float64 as the tests' reference.
#pragma once
#include <vector>

#include "tessera/nn/layers.h"
#include "tessera/nn/loss_model.h"
#include "tessera/ops.h"

namespace tessera::test {

struct Rows {
  Tensor x, y;  // [B, 3], [B, 1]
  Rows to(Device d) const { return {x.to(d), y.to(d)}; }
};

struct Regressor : nn::LossModel<Rows> {
  nn::Linear fc{this, "fc", 3, 1};
  Tensor loss(const Rows& b) override {
    // In the dtype the engine casts the model to (bf16/fp16 with mixed precision).
    const DType dt = fc.weight.dtype();
    const Tensor err = fc(b.x.to(dt)) - b.y.to(dt);
    return mean(err * err);
  }
};

// B rows drawn from a generator seeded by `seed`.
inline Rows make_rows(int64_t rows, uint64_t seed) {
  Generator g(seed);
  const Tensor x = rand({rows, 3}, DType::Float32, Device::cpu(), &g) * 2.0 - 1.0;
  const Tensor y = rand({rows, 1}, DType::Float32, Device::cpu(), &g);
  return {x, y};
}

// d/dW and d/db of mean((x W^T + b - y)^2), in float64: {dW0, dW1, dW2, db}.
inline std::vector<double> regressor_grads(const Regressor& m, const Rows& b) {
  const auto w = m.fc.weight.to_vector(), bias = m.fc.bias.to_vector();
  const auto x = b.x.to_vector(), y = b.y.to_vector();
  const size_t rows = y.size();
  std::vector<double> g(4, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    double err = bias[0] - y[r];
    for (size_t i = 0; i < 3; ++i) err += w[i] * x[r * 3 + i];
    for (size_t i = 0; i < 3; ++i) g[i] += 2.0 * err * x[r * 3 + i] / static_cast<double>(rows);
    g[3] += 2.0 * err / static_cast<double>(rows);
  }
  return g;
}

}  // namespace tessera::test
