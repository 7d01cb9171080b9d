// Turns every CUDA runtime status into a tessera::Error naming the call and file:line.
#pragma once
#include <cuda_runtime.h>

#include "tessera/error.h"

#define TS_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    const cudaError_t ts_status = (call);                                                     \
    if (ts_status != cudaSuccess)                                                             \
      ::tessera::fail(#call, " failed at ", __FILE__, ":", __LINE__, ": ",                    \
                      cudaGetErrorName(ts_status), " (", cudaGetErrorString(ts_status), ")"); \
  } while (0)
