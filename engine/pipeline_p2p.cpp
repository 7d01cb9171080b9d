// PipelineEngine's point-to-point messages: activations forward, gradients back, their
// shapes and dtypes described once.
#include "tessera/engine/pipeline_engine.h"
#include "tessera/error.h"
#include "tessera/ops.h"

namespace tessera::engine {

using parallel::PipeValue;

namespace {
constexpr int kActivationTag = 7001, kGradTag = 7002;
}  // namespace

// The first message of each model chunk's activations describes the tensors: [count, then per
// tensor dtype, rank, dims...]; gradients go back in the shapes of the floating activations.
void PipelineEngine::send(const PipeValue& value, int peer, bool activation, int64_t chunk) {
  const int tag = activation ? kActivationTag : kGradTag;
  Meta& sent = sent_meta_[static_cast<size_t>(chunk)];
  if (activation && !sent.known) {
    std::vector<int64_t> meta{static_cast<int64_t>(value.size())};
    for (const Tensor& t : value) {
      meta.push_back(static_cast<int64_t>(t.dtype()));
      meta.push_back(t.dim());
      for (int64_t d : t.shape()) meta.push_back(d);
      sent.dtypes.push_back(t.dtype());
      sent.shapes.push_back(t.shape());
    }
    Tensor length = scalar_tensor(static_cast<double>(meta.size()), DType::Int64, Device::cpu());
    sends_.push_back(pipe_->send_async(length.reshape({1}), peer, tag));
    sends_.push_back(
        pipe_->send_async(from_vector(meta, {static_cast<int64_t>(meta.size())}), peer, tag));
    sent.known = true;
  }
  if (activation) {
    // Every batch must have the first batch's shapes (DeepSpeed caches them likewise).
    TS_CHECK(value.size() == sent.shapes.size(), "PipelineEngine: stage ", module_.stage_id(),
             " sends ", value.size(), " tensors, but the first batch sent ", sent.shapes.size());
    for (size_t i = 0; i < value.size(); ++i)
      TS_CHECK(value[i].shape() == sent.shapes[i] && value[i].dtype() == sent.dtypes[i],
               "PipelineEngine: stage ", module_.stage_id(), " output ", i, " is ",
               value[i].describe(), ", but the first batch's was ", shape_str(sent.shapes[i]), " ",
               dtype_name(sent.dtypes[i]), ": every micro-batch must have the same shapes");
  }
  // Sends complete in the background (waited for at the batch's end): only receives block, so
  // any schedule whose receives are matched runs without deadlock.
  reap_sends();
  // A value's tensors go as one batch (ProcessGroup::batch_send_recv: on NCCL one group of
  // transfers, so a peer's matching batch cannot wait on part of it).
  std::vector<parallel::P2POp> ops;
  for (const Tensor& t : value)
    ops.push_back({parallel::P2POp::Kind::Send, t.contiguous(), peer, tag});
  for (parallel::Work& w : pipe_->batch_send_recv(ops)) sends_.push_back(std::move(w));
}

void PipelineEngine::reap_sends() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (!it->done()) {
      ++it;
      continue;
    }
    it->wait();  // (a failed send's error)
    it = sends_.erase(it);
  }
}

PipeValue PipelineEngine::recv(int peer, bool activation, int64_t chunk) {
  const int tag = activation ? kActivationTag : kGradTag;
  Meta& received = received_meta_[static_cast<size_t>(chunk)];
  const Meta& sent = sent_meta_[static_cast<size_t>(chunk)];
  if (activation && !received.known) {
    Tensor length = zeros({1}, DType::Int64, Device::cpu());
    pipe_->recv_async(length, peer, tag).wait();
    Tensor meta = zeros({static_cast<int64_t>(length.item())}, DType::Int64, Device::cpu());
    pipe_->recv_async(meta, peer, tag).wait();
    const int64_t* v = meta.data<int64_t>();
    size_t at = 1;
    for (int64_t i = 0; i < v[0]; ++i) {
      received.dtypes.push_back(static_cast<DType>(v[at++]));
      const int64_t rank = v[at++];
      received.shapes.emplace_back(v + at, v + at + rank);
      at += static_cast<size_t>(rank);
    }
    received.known = true;
  }
  // Activations arrive as the previous stage sent them; gradients as this stage sent its
  // floating outputs.
  const Meta& m = activation ? received : sent;
  PipeValue out;
  std::vector<parallel::P2POp> ops;
  for (size_t i = 0; i < m.shapes.size(); ++i) {
    if (!activation && !is_floating(m.dtypes[i])) continue;
    out.push_back(Tensor::empty(m.shapes[i], m.dtypes[i], Device::cpu()));
    ops.push_back({parallel::P2POp::Kind::Recv, out.back(), peer, tag});
  }
  for (parallel::Work& w : pipe_->batch_send_recv(ops)) w.wait();
  return out;
}

}  // namespace tessera::engine
