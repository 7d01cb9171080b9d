// Turns every CUDA runtime, cuBLAS and cuDNN status into a tessera::Error naming the call and
// file:line.
#pragma once
#include <cuda_runtime.h>

#include "cublaslt_library.h"
#include "tessera/error.h"

#define TS_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    const cudaError_t ts_status = (call);                                                     \
    if (ts_status != cudaSuccess)                                                             \
      ::tessera::fail(#call, " failed at ", __FILE__, ":", __LINE__, ": ",                    \
                      cudaGetErrorName(ts_status), " (", cudaGetErrorString(ts_status), ")"); \
  } while (0)

// After a kernel launch: a bad configuration surfaces here (a fault, at the next sync).
#define TS_CUDA_LAUNCH_CHECK(name)                                                                 \
  do {                                                                                             \
    const cudaError_t ts_status = cudaGetLastError();                                              \
    if (ts_status != cudaSuccess)                                                                  \
      ::tessera::fail("cuda: launching the ", name, " kernel failed at ", __FILE__, ":", __LINE__, \
                      ": ", cudaGetErrorName(ts_status), " (", cudaGetErrorString(ts_status),      \
                      ")");                                                                        \
  } while (0)

#define TS_CUBLAS_CHECK(call)                                                       \
  do {                                                                              \
    const cublasStatus_t ts_status = (call);                                        \
    if (ts_status != CUBLAS_STATUS_SUCCESS)                                         \
      ::tessera::fail(#call, " failed at ", __FILE__, ":", __LINE__, ": ",          \
                      ::tessera::cuda::cublaslt().GetStatusName(ts_status), " (",   \
                      ::tessera::cuda::cublaslt().GetStatusString(ts_status), ")"); \
  } while (0)
