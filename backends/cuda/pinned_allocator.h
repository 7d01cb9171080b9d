// The backend's side of pinned host memory (tessera/storage.h has the contract).
#pragma once
#include <cuda_runtime.h>

#include "tessera/storage.h"
#include "tessera/tensor_base.h"

namespace tessera::cuda {

// An asynchronous copy on `stream` reads or writes `host`'s pinned storage: later CPU writes
// and reuse of the block wait for it. No-op for pageable tensors.
void record_pinned_copy(const TensorBase& host, cudaStream_t stream);

// Frees cached pinned blocks that no copy still uses (cuda_empty_cache calls it).
void empty_pinned_cache();

}  // namespace tessera::cuda
