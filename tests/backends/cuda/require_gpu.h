// CUDA tests return early, saying why, where no GPU is visible.
#pragma once
#include <doctest/doctest.h>

#include "tessera/cuda.h"

#define REQUIRE_GPU_OR_SKIP()                                                          \
  if (::tessera::cuda_device_count() == 0) {                                           \
    MESSAGE("SKIPPED: needs a CUDA device: " << ::tessera::cuda_unavailable_reason()); \
    return;                                                                            \
  }
