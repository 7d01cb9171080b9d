// TS_HOST_DEVICE: a function compiled for the host and, under nvcc, for CUDA devices too, so
// the same code computes the same bits on every backend (Philox, block quantization, FP8).
#pragma once

#if defined(__CUDACC__)
#define TS_HOST_DEVICE __host__ __device__
#else
#define TS_HOST_DEVICE
#endif
