#include "tessera/parallel/pipe_schedule.h"

#include <algorithm>
#include <deque>

#include "tessera/error.h"

namespace tessera::parallel {

namespace {

using I = PipeInstruction;

I make(I::Kind kind, int64_t buffer = -1, int64_t micro_batch = -1, int64_t chunk = 0) {
  return {kind, buffer, micro_batch, chunk};
}

}  // namespace

std::string PipeInstruction::name() const {
  static const char* names[] = {"LoadMicroBatch",    "ForwardPass",        "BackwardPass",
                                "BackwardInputPass", "BackwardWeightPass", "SendActivation",
                                "RecvActivation",    "SendGrad",           "RecvGrad",
                                "ReduceGrads",       "ReduceTiedGrads",    "OptimizerStep"};
  return names[kind];
}

std::string PipeInstruction::str() const {
  return buffer_id < 0 ? name() + "()" : name() + "(buffer_id=" + std::to_string(buffer_id) + ")";
}

PipeSchedule::PipeSchedule(int64_t micro_batches, int64_t stages, int64_t stage_id)
    : micro_batches_(micro_batches), stages_(stages), stage_id_(stage_id) {
  TS_CHECK(micro_batches >= 1 && stages >= 1 && stage_id >= 0 && stage_id < stages,
           "pipeline schedule: needs micro_batches >= 1 and 0 <= stage_id < stages, got ",
           micro_batches, " micro-batches, stage ", stage_id, " of ", stages);
}

void PipeSchedule::append_step_end(PipeStep& s) {
  s.push_back(make(I::ReduceTiedGrads));
  s.push_back(make(I::ReduceGrads));
  s.push_back(make(I::OptimizerStep));
}

PipeStep PipeSchedule::forward_step(int64_t part, int64_t parts, int64_t buf, int64_t mb,
                                    int64_t chunk) {
  PipeStep s;
  if (part > 0) s.push_back(make(I::RecvActivation, buf, mb, chunk));
  if (part == 0 || part == parts - 1) s.push_back(make(I::LoadMicroBatch, buf, mb, chunk));
  s.push_back(make(I::ForwardPass, buf, mb, chunk));
  if (part < parts - 1) s.push_back(make(I::SendActivation, buf, mb, chunk));
  return s;
}

PipeStep PipeSchedule::backward_step(I::Kind pass, int64_t part, int64_t parts, int64_t buf,
                                     int64_t mb, int64_t chunk) {
  PipeStep s;
  if (part < parts - 1) s.push_back(make(I::RecvGrad, buf, mb, chunk));
  s.push_back(make(pass, buf, mb, chunk));
  if (part > 0) s.push_back(make(I::SendGrad, buf, mb, chunk));
  return s;
}

// Lock-step slots: stage s runs forwards on the steps of its parity, micro-batch (t - s) / 2,
// and backwards on the others, micro-batch (t + s + 1) / 2 - p.
std::pair<int64_t, bool> TrainSchedule::slot(int64_t step) const {
  const int64_t s = stage_id_;
  if ((step - s) % 2 == 0) return {(step - s) / 2, true};
  return {(step + s + 1) / 2 - stages_, false};
}

int64_t TrainSchedule::num_pipe_buffers() const {
  return std::max<int64_t>(2, std::min(stages_ - stage_id_, micro_batches_));
}

std::vector<PipeStep> TrainSchedule::steps() const {
  std::vector<PipeStep> out;
  const int64_t total = 2 * (micro_batches_ + stages_ - 1);
  int64_t prev = -1;
  for (int64_t t = 0; t < total; ++t) {
    const auto [mb, forward] = slot(t);
    const bool have_prev = valid_micro_batch(prev), have = valid_micro_batch(mb);
    const int64_t prev_buf = have_prev ? buffer_of(prev) : -1, buf = have ? buffer_of(mb) : -1;
    PipeStep cmds;
    // The previous slot's result leaves as this slot's input arrives.
    if (forward) {
      if (have_prev && valid_stage(stage_id_ - 1))
        cmds.push_back(make(I::SendGrad, prev_buf, prev));
      if (have && valid_stage(stage_id_ - 1)) cmds.push_back(make(I::RecvActivation, buf, mb));
    } else {
      if (have && valid_stage(stage_id_ + 1)) cmds.push_back(make(I::RecvGrad, buf, mb));
      if (have_prev && valid_stage(stage_id_ + 1))
        cmds.push_back(make(I::SendActivation, prev_buf, prev));
    }
    if ((is_first_stage() || is_last_stage()) && forward && have)
      cmds.push_back(make(I::LoadMicroBatch, buf, mb));
    if (have) cmds.push_back(make(forward ? I::ForwardPass : I::BackwardPass, buf, mb));
    if (t == total - 1) append_step_end(cmds);
    prev = mb;
    out.push_back(std::move(cmds));
  }
  return out;
}

std::vector<PipeStep> InferenceSchedule::steps() const {
  std::vector<PipeStep> out;
  const bool even = stage_id_ % 2 == 0;
  for (int64_t t = 0; t < micro_batches_ + stages_ - 1; ++t) {
    const int64_t mb = t - stage_id_;
    // Two buffers alternate; neighbouring stages use them in opposite phases.
    const int64_t recv_buf = even ? t % 2 : (t + 1) % 2, send_buf = even ? (t + 1) % 2 : t % 2;
    PipeStep cmds;
    if ((is_first_stage() || is_last_stage()) && valid_micro_batch(mb))
      cmds.push_back(make(I::LoadMicroBatch, recv_buf, mb));
    const bool send = valid_stage(stage_id_ + 1) && valid_micro_batch(mb - 1);
    const bool recv = valid_stage(stage_id_ - 1) && valid_micro_batch(mb);
    // Even stages send first, odd ones receive first: blocking pairs never wait on each other.
    if (even && send) cmds.push_back(make(I::SendActivation, send_buf, mb - 1));
    if (recv) cmds.push_back(make(I::RecvActivation, recv_buf, mb));
    if (!even && send) cmds.push_back(make(I::SendActivation, send_buf, mb - 1));
    if (valid_micro_batch(mb)) cmds.push_back(make(I::ForwardPass, recv_buf, mb));
    out.push_back(std::move(cmds));
  }
  return out;
}

DataParallelSchedule::DataParallelSchedule(int64_t micro_batches, int64_t stages, int64_t stage_id)
    : PipeSchedule(micro_batches, stages, stage_id) {
  TS_CHECK(stages == 1, "DataParallelSchedule: one stage only, got ", stages);
}

std::vector<PipeStep> DataParallelSchedule::steps() const {
  std::vector<PipeStep> out;
  for (int64_t mb = 0; mb < micro_batches_; ++mb) {
    PipeStep cmds{make(I::LoadMicroBatch, 0, mb), make(I::ForwardPass, 0, mb),
                  make(I::BackwardPass, 0, mb)};
    if (mb == micro_batches_ - 1) {
      cmds.push_back(make(I::ReduceGrads));
      cmds.push_back(make(I::OptimizerStep));
    }
    out.push_back(std::move(cmds));
  }
  return out;
}

InterleavedSchedule::InterleavedSchedule(int64_t micro_batches, int64_t stages, int64_t stage_id,
                                         int64_t virtual_stages)
    : PipeSchedule(micro_batches, stages, stage_id), virtual_stages_(virtual_stages) {
  TS_CHECK(virtual_stages >= 1, "interleaved schedule: virtual_stages must be >= 1, got ",
           virtual_stages);
  TS_CHECK(micro_batches % stages == 0, "interleaved schedule: ", micro_batches,
           " micro-batches are not a multiple of the ", stages, " stages (Megatron's condition)");
}

int64_t InterleavedSchedule::num_pipe_buffers() const {
  return virtual_stages_ * micro_batches_;  // one per chunk and micro-batch: buffer chunk * m + mb
}

std::vector<PipeStep> InterleavedSchedule::steps() const {
  const int64_t p = stages_, v = virtual_stages_, m = micro_batches_, r = stage_id_, total = m * v;
  // The k-th forward (backward) of this stage: groups of p micro-batches, chunk by chunk
  // (backwards from the last chunk), as Megatron orders them.
  auto micro_batch = [&](int64_t k) { return k / (p * v) * p + k % p; };
  auto forward = [&](int64_t k) {
    const int64_t c = k / p % v, mb = micro_batch(k);
    return forward_step(c * p + r, v * p, c * m + mb, mb, c);
  };
  auto backward = [&](int64_t k) {
    const int64_t c = v - 1 - k / p % v, mb = micro_batch(k);
    return backward_step(I::BackwardPass, c * p + r, v * p, c * m + mb, mb, c);
  };
  const int64_t warmup = std::min(total, (p - r - 1) * 2 + (v - 1) * p);
  std::vector<PipeStep> out;
  for (int64_t k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int64_t k = 0; k < total - warmup; ++k) {
    out.push_back(forward(warmup + k));
    out.push_back(backward(k));
  }
  for (int64_t k = total - warmup; k < total; ++k) out.push_back(backward(k));
  append_step_end(out.back());
  return out;
}

int64_t peak_activation_bytes(const std::vector<PipeStep>& steps,
                              const std::vector<int64_t>& chunk_bytes) {
  const bool split = std::any_of(steps.begin(), steps.end(), [](const PipeStep& s) {
    return std::any_of(s.begin(), s.end(),
                       [](const I& in) { return in.kind == I::BackwardWeightPass; });
  });
  int64_t held = 0, peak = 0;
  for (const PipeStep& step : steps)
    for (const I& in : step) {
      const bool ends = in.kind == (split ? I::BackwardWeightPass : I::BackwardPass);
      if (in.kind != I::ForwardPass && !ends) continue;
      TS_CHECK(in.chunk >= 0 && in.chunk < static_cast<int64_t>(chunk_bytes.size()),
               "peak_activation_bytes: ", in.str(), " of chunk ", in.chunk, ", but ",
               chunk_bytes.size(), " chunks' sizes");
      const int64_t bytes = chunk_bytes[static_cast<size_t>(in.chunk)];
      held += in.kind == I::ForwardPass ? bytes : -bytes;
      peak = std::max(peak, held);
    }
  return peak;
}

int64_t peak_activations(const std::vector<PipeStep>& steps) {
  int64_t chunks = 1;
  for (const PipeStep& step : steps)
    for (const I& in : step) chunks = std::max(chunks, in.chunk + 1);
  return peak_activation_bytes(steps, std::vector<int64_t>(static_cast<size_t>(chunks), 1));
}

}  // namespace tessera::parallel
