// ||got - want|| / ||want|| (Frobenius): the relative error of a tensor as a whole, as the
// tensor-parallel tests compare shards with one process's tensors.
#pragma once
#include <doctest/doctest.h>

#include <cmath>

#include "tessera/tensor.h"

inline double rel_diff(const tessera::Tensor& got, const tessera::Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  const auto g = got.to_vector(), w = want.to_vector();
  double err = 0, norm = 1e-300;
  for (size_t i = 0; i < g.size(); ++i) {
    err += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return std::sqrt(err / norm);
}
