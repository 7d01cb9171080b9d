#include "tessera/optim/compression_errors.h"

#include <algorithm>

#include "tessera/ops.h"

namespace tessera::optim {

namespace {

Tensor float_tensor(const std::vector<float>& v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::Float32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

void CompressionErrors::all_reduce(const std::string& name, float* data, int64_t n,
                                   OneBitTransport& transport) {
  all_reduce(std::vector<Request>{{name, data, n}}, transport);
}

void CompressionErrors::all_reduce(const std::vector<Request>& requests,
                                   OneBitTransport& transport) {
  const int world = transport.world();
  if (world == 1 || requests.empty()) return;
  std::vector<std::vector<float>> buffers(requests.size());
  std::vector<CompressedBuffer> items;
  for (size_t r = 0; r < requests.size(); ++r) {
    const Request& q = requests[r];
    const int64_t padded = onebit_padded_size(q.n, world);
    Errors& e = errors_[q.name];
    if (e.worker.empty()) {
      e.worker.assign(static_cast<size_t>(padded), 0.0f);
      e.server.assign(static_cast<size_t>(padded / world), 0.0f);
    }
    buffers[r].assign(static_cast<size_t>(padded), 0.0f);
    std::copy(q.data, q.data + q.n, buffers[r].begin());
    items.push_back({&buffers[r], &e.worker, &e.server});
  }
  compressed_all_reduce(items, transport);
  for (size_t r = 0; r < requests.size(); ++r)
    std::copy(buffers[r].begin(), buffers[r].begin() + requests[r].n, requests[r].data);
}

void CompressionErrors::zero() {
  for (auto& [name, e] : errors_) {
    std::fill(e.worker.begin(), e.worker.end(), 0.0f);
    std::fill(e.server.begin(), e.server.end(), 0.0f);
  }
}

void CompressionErrors::clear() {
  errors_.clear();
}

void CompressionErrors::save(std::map<std::string, Tensor>& out) const {
  for (const auto& [name, e] : errors_) {
    out[name + ".worker_error"] = float_tensor(e.worker);
    out[name + ".server_error"] = float_tensor(e.server);
  }
}

void CompressionErrors::load(const std::map<std::string, Tensor>& state,
                             const std::function<int64_t(const std::string&)>& numel_of,
                             int world) {
  errors_.clear();
  for (const auto& [key, t] : state) {
    const bool worker = ends_with(key, ".worker_error");
    if (!worker && !ends_with(key, ".server_error")) continue;
    const std::string name = key.substr(0, key.rfind('.'));
    const int64_t n = numel_of(name);
    TS_CHECK(n >= 0, "compression errors: '", key, "' belongs to no parameter");
    const int64_t padded = onebit_padded_size(n, world);
    const int64_t want = worker ? padded : padded / world;
    TS_CHECK(t.numel() == want && t.dtype() == DType::Float32, "compression errors: '", key,
             "' is ", t.describe(), ", expected ", want, " float32 values");
    const Tensor c = t.contiguous();
    (worker ? errors_[name].worker : errors_[name].server)
        .assign(c.data<float>(), c.data<float>() + want);
  }
  for (const auto& [name, e] : errors_)
    TS_CHECK(!e.worker.empty() && !e.server.empty(), "compression errors: '", name, "' lacks its ",
             e.worker.empty() ? "worker" : "server", " error");
}

void check_saved_rank_count(const char* who, const std::map<std::string, Tensor>& rank0,
                            int world) {
  const auto it = rank0.find("world");
  if (it == rank0.end()) return;
  const auto saved = static_cast<int64_t>(it->second.item());
  TS_CHECK(saved == world, who, ": the checkpoint holds each of its ", saved,
           " data-parallel ranks' own state (the compression errors: the server's a chunk of ",
           saved, ") and this run has ", world,
           " ranks, so it cannot be carried over; resume with ", saved,
           " ranks, or load the weights alone (load_optimizer_states = false)");
}

}  // namespace tessera::optim
