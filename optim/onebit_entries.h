// The registry entries of DeepSpeed's compressed optimizers (OneBitAdam, ZeroOneAdam,
// OneBitLamb), for optimizer_registry.cpp's built-in list.
#pragma once
#include "tessera/optim/optimizer_registry.h"

namespace tessera::optim {

OptimizerEntry onebit_adam_entry();
OptimizerEntry zero_one_adam_entry();
OptimizerEntry onebit_lamb_entry();

}  // namespace tessera::optim
