// Umbrella header: everything a user of the native C++ API needs.
#pragma once
#include "tessera/autograd/checkpoint.h"
#include "tessera/autograd/engine.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/node.h"
#include "tessera/cuda.h"
#include "tessera/dispatch.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/rng.h"
#include "tessera/tensor.h"
