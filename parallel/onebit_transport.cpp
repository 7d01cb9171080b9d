#include "tessera/parallel/onebit_transport.h"

#include "tessera/ops.h"

namespace tessera::parallel {

namespace {

Tensor words_tensor(const std::vector<int32_t>& words) {
  Tensor t = Tensor::empty({static_cast<int64_t>(words.size())}, DType::Int32);
  std::copy(words.begin(), words.end(), t.data<int32_t>());
  return t;
}

std::vector<int32_t> words_of(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

}  // namespace

std::vector<std::vector<int32_t>> ProcessGroupOneBitTransport::all_to_all(
    const std::vector<std::vector<int32_t>>& send) {
  const int n = world(), me = rank();
  TS_CHECK(static_cast<int>(send.size()) == n, "1-bit all_to_all on rank ", me, ": ", send.size(),
           " chunks for ", n, " ranks");
  const int64_t words = static_cast<int64_t>(send[static_cast<size_t>(me)].size());
  std::vector<Tensor> out(static_cast<size_t>(n));
  std::vector<P2POp> ops;
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) {
      out[static_cast<size_t>(peer)] = words_tensor(send[static_cast<size_t>(me)]);
      continue;
    }
    TS_CHECK(static_cast<int64_t>(send[static_cast<size_t>(peer)].size()) == words,
             "1-bit all_to_all on rank ", me, ": chunks of different lengths");
    out[static_cast<size_t>(peer)] = Tensor::empty({words}, DType::Int32);
    ops.push_back({P2POp::Kind::Send, words_tensor(send[static_cast<size_t>(peer)]), peer});
    ops.push_back({P2POp::Kind::Recv, out[static_cast<size_t>(peer)], peer});
  }
  for (Work& w : group_->batch_send_recv(ops)) w.wait();
  std::vector<std::vector<int32_t>> got;
  for (const Tensor& t : out) got.push_back(words_of(t));
  return got;
}

std::vector<std::vector<int32_t>> ProcessGroupOneBitTransport::all_gather(
    const std::vector<int32_t>& mine) {
  const int64_t words = static_cast<int64_t>(mine.size());
  Tensor all = Tensor::empty({words * world()}, DType::Int32);
  group_->all_gather(all, words_tensor(mine));
  std::vector<std::vector<int32_t>> out;
  for (int r = 0; r < world(); ++r) out.push_back(words_of(all.narrow(0, r * words, words)));
  return out;
}

}  // namespace tessera::parallel
