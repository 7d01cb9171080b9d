// Error-compensated 1-bit averaging of a buffer over data-parallel ranks: DeepSpeed's
// compressed_allreduce (runtime/comm/mpi.py and nccl.py, the 1-bit Adam paper's algorithm 1),
// the collective of the compressed optimizers. Each rank adds its worker error to its buffer,
// keeps sign(x) (0 counts as +) and one scale ||x|| / sqrt(n), and sends chunk c of the signs
// to rank c (the chunk's server) with its scale; a server averages the ranks' scaled signs of
// its chunk, adds its server error and compresses that again; every rank then gathers each
// chunk's signs and scale. Both errors keep what compression lost, for the next call.
//
// The arithmetic is here; the exchange of packed signs and scales is a OneBitTransport
// (parallel::ProcessGroupOneBitTransport over a process group).
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::optim {

class OneBitTransport {
 public:
  virtual ~OneBitTransport() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // send[c] goes to rank c (send[rank()] stays); returns, for each rank j, what j sent here.
  // All vectors of one call have one length.
  virtual std::vector<std::vector<int32_t>> all_to_all(
      const std::vector<std::vector<int32_t>>& send) = 0;
  // Every rank's `mine` (one length on every rank), in rank order.
  virtual std::vector<std::vector<int32_t>> all_gather(const std::vector<int32_t>& mine) = 0;
};

// DeepSpeed's corrected_tensor_size: n rounded up to a multiple of world * lcm(world, 8), so
// that each rank's chunk of signs is whole bytes.
int64_t onebit_padded_size(int64_t n, int world);

// buffer <- the 1-bit average over the ranks of (buffer + worker_error); buffer and
// worker_error hold onebit_padded_size(n, world) floats (the padding counts, as DeepSpeed's),
// server_error a chunk of it (padded / world). With one rank the buffer is left as it is
// (DeepSpeed's optimizers skip the call there).
void compressed_all_reduce(std::vector<float>& buffer, std::vector<float>& worker_error,
                           std::vector<float>& server_error, OneBitTransport& transport);

// One tensor's part of a batched call (sizes as above).
struct CompressedBuffer {
  std::vector<float>* buffer;
  std::vector<float>* worker_error;
  std::vector<float>* server_error;
};
// Several tensors at once, each averaged exactly as alone (its own scales, chunks and errors,
// bit for bit), their packed signs and scales exchanged in one all-to-all and one all-gather:
// two messages per peer and step instead of four per tensor (DeepSpeed's 1-bit and 0/1 Adam
// make one call per tensor; on many small tensors the latency was the step's cost).
void compressed_all_reduce(const std::vector<CompressedBuffer>& items, OneBitTransport& transport);

}  // namespace tessera::optim
