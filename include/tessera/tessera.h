// Umbrella header: everything a user of the native C++ API needs.
#pragma once
#include "tessera/autograd/activation_checkpoint.h"
#include "tessera/autograd/backward.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/node.h"
#include "tessera/autograd/split_backward.h"
#include "tessera/cuda.h"
#include "tessera/dispatch.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/rng.h"
#include "tessera/tensor.h"
