// The error feedback of the 1-bit optimizers: each tensor's worker error (what compressing
// its buffer lost on this rank) and server error (what compressing this rank's chunk of the
// average lost), kept between steps by name, and the compressed all-reduce over them.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tessera/optim/compressed_allreduce.h"
#include "tessera/tensor.h"

namespace tessera::optim {

class CompressionErrors {
 public:
  // data[0, n) <- its 1-bit average over the transport's ranks, with the errors of `name`
  // (created as zeros at their first use). Nothing to do with one rank.
  void all_reduce(const std::string& name, float* data, int64_t n, OneBitTransport& transport);
  // Several tensors' in one exchange (compressed_all_reduce's batched form), each exactly as
  // all_reduce would average it alone.
  struct Request {
    std::string name;
    float* data;
    int64_t n;
  };
  void all_reduce(const std::vector<Request>& requests, OneBitTransport& transport);
  void zero();   // every error back to 0, sizes kept (0/1 Adam at its freeze)
  void clear();  // none kept
  bool empty() const { return errors_.empty(); }
  // "<name>.worker_error" and "<name>.server_error" into `out`.
  void save(std::map<std::string, Tensor>& out) const;
  // The entries of `state` named so (others are left to the caller): each must belong to a
  // tensor `numel_of` knows (-1: none) and hold its padded size at `world` ranks.
  void load(const std::map<std::string, Tensor>& state,
            const std::function<int64_t(const std::string&)>& numel_of, int world);

 private:
  struct Errors {
    std::vector<float> worker, server;
  };
  std::map<std::string, Errors> errors_;
};

// A checkpoint's rank state (rank 0's, with its "world" entry) taken at another rank count
// cannot be carried over: an error naming both counts and `who`.
void check_saved_rank_count(const char* who, const std::map<std::string, Tensor>& rank0, int world);

}  // namespace tessera::optim
