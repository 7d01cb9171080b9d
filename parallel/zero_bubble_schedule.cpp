// ZB-H1 (Qi et al. 2023) built from 1F1B: each stage keeps 1F1B's order of forwards and
// backwards, its backwards computing the input gradient only (BackwardInputPass, which the
// stage before waits for), and stage s runs micro-batch k's weight gradient
// (BackwardWeightPass) after micro-batch k + s's input gradient, the last s at the end. The
// input gradients so travel back a weight pass sooner per stage, and the later stages' delayed
// weight passes fill what would be 1F1B's cool-down bubble. Memory: micro-batches between
// forward and input gradient obey 1F1B's p - stage; between forward and weight gradient, at
// most p on every stage (1F1B's first stage's).
#include <algorithm>

#include "tessera/parallel/pipe_schedule.h"

namespace tessera::parallel {

// A buffer per micro-batch: deferred weight passes keep theirs past the next forwards.
int64_t ZeroBubbleH1Schedule::num_pipe_buffers() const {
  return micro_batches_;
}

std::vector<PipeStep> ZeroBubbleH1Schedule::steps() const {
  using I = PipeInstruction;
  const int64_t p = stages_, s = stage_id_, m = micro_batches_;
  std::vector<PipeStep> out;
  auto forward = [&](int64_t mb) { out.push_back(forward_step(s, p, buffer_of(mb), mb, 0)); };
  auto weights = [&](int64_t mb) {
    out.push_back({{I::BackwardWeightPass, buffer_of(mb), mb, 0}});
  };
  auto input_grad = [&](int64_t mb) {
    out.push_back(backward_step(I::BackwardInputPass, s, p, buffer_of(mb), mb, 0));
    if (mb - s >= 0) weights(mb - s);  // this stage's lag: s micro-batches
  };
  // 1F1B: p - s - 1 forwards to warm up, then a forward and a backward each.
  const int64_t warmup = std::min(m, p - s - 1);
  for (int64_t mb = 0; mb < warmup; ++mb) forward(mb);
  for (int64_t mb = 0; mb < m; ++mb) {
    if (warmup + mb < m) forward(warmup + mb);
    input_grad(mb);
  }
  for (int64_t mb = std::max<int64_t>(0, m - s); mb < m; ++mb) weights(mb);
  append_step_end(out.back());
  return out;
}

}  // namespace tessera::parallel
