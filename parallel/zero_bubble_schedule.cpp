// ZB-H1: each stage's order comes from running the whole pipeline at unit cost (F = B = W = 1)
// with the rule that a free stage does, in this order of preference: the input-gradient pass of
// its oldest micro-batch whose gradient has arrived (the critical path), a forward pass while
// fewer than p - stage micro-batches are between forward and input gradient (1F1B's bound), a
// deferred weight-gradient pass (which keeps only its layers' inputs). The weight passes so fill
// what would be 1F1B's bubble.
#include <algorithm>
#include <limits>

#include "tessera/parallel/pipe_schedule.h"

namespace tessera::parallel {

namespace {

enum class Op { F, B, W };

// Every stage's order of (op, micro-batch).
std::vector<std::vector<std::pair<Op, int64_t>>> zb_h1_orders(int64_t p, int64_t m) {
  constexpr int64_t never = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> f_done(p, std::vector<int64_t>(m, never)),
      b_done(p, std::vector<int64_t>(m, never));
  std::vector<int64_t> f(p, 0), b(p, 0), w(p, 0);
  std::vector<std::vector<std::pair<Op, int64_t>>> orders(p);
  for (int64_t t = 0; std::any_of(w.begin(), w.end(), [&](int64_t x) { return x < m; }); ++t) {
    for (int64_t s = 0; s < p; ++s) {
      const bool b_ready =
          b[s] < f[s] && f_done[s][b[s]] <= t && (s == p - 1 || b_done[s + 1][b[s]] <= t);
      const bool f_ready = f[s] < m && f[s] - b[s] < p - s && (s == 0 || f_done[s - 1][f[s]] <= t);
      if (b_ready) {
        b_done[s][b[s]] = t + 1;
        orders[s].push_back({Op::B, b[s]++});
      } else if (f_ready) {
        f_done[s][f[s]] = t + 1;
        orders[s].push_back({Op::F, f[s]++});
      } else if (w[s] < b[s]) {
        orders[s].push_back({Op::W, w[s]++});
      }
    }
  }
  return orders;
}

}  // namespace

// A buffer per micro-batch: deferred weight passes keep theirs past the next forwards.
int64_t ZeroBubbleH1Schedule::num_pipe_buffers() const {
  return micro_batches_;
}

std::vector<PipeStep> ZeroBubbleH1Schedule::steps() const {
  using I = PipeInstruction;
  const int64_t p = stages_, s = stage_id_;
  std::vector<PipeStep> out;
  const auto orders = zb_h1_orders(p, micro_batches_);
  for (const auto& [op, mb] : orders[static_cast<size_t>(s)]) {
    const int64_t buf = buffer_of(mb);
    PipeStep cmds;
    if (op == Op::F) {
      if (s > 0) cmds.push_back({I::RecvActivation, buf, mb, 0});
      if (s == 0 || s == p - 1) cmds.push_back({I::LoadMicroBatch, buf, mb, 0});
      cmds.push_back({I::ForwardPass, buf, mb, 0});
      if (s < p - 1) cmds.push_back({I::SendActivation, buf, mb, 0});
    } else if (op == Op::B) {
      if (s < p - 1) cmds.push_back({I::RecvGrad, buf, mb, 0});
      cmds.push_back({I::BackwardInputPass, buf, mb, 0});
      if (s > 0) cmds.push_back({I::SendGrad, buf, mb, 0});
    } else {
      cmds.push_back({I::BackwardWeightPass, buf, mb, 0});
    }
    out.push_back(std::move(cmds));
  }
  out.back().push_back({I::ReduceTiedGrads, -1, -1, 0});
  out.back().push_back({I::ReduceGrads, -1, -1, 0});
  out.back().push_back({I::OptimizerStep, -1, -1, 0});
  return out;
}

}  // namespace tessera::parallel
