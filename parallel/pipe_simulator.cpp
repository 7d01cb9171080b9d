#include "tessera/parallel/pipe_simulator.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include "tessera/error.h"

namespace tessera::parallel {

double PipeSimulation::bubble_fraction() const {
  double total = 0;
  for (double b : busy) total += b;
  return 1.0 - total / (makespan * static_cast<double>(busy.size()));
}

namespace {

using I = PipeInstruction;

double cost_of(const I& in, const PipeCosts& c) {
  switch (in.kind) {
    case I::ForwardPass:
      return c.forward;
    case I::BackwardPass:
      return c.backward;
    case I::BackwardInputPass:
      return c.backward_input;
    case I::BackwardWeightPass:
      return c.backward_weight;
    default:
      return 0.0;
  }
}

struct Stage {
  std::vector<I> program;
  size_t next = 0;
  double clock = 0, busy = 0;
  int64_t in_flight = 0, peak = 0;
};

}  // namespace

PipeSimulation simulate_pipeline(const std::vector<std::vector<PipeStep>>& streams,
                                 const PipeCosts& costs) {
  const auto p = static_cast<int64_t>(streams.size());
  TS_CHECK(p >= 1, "simulate_pipeline: no stages");
  std::vector<Stage> stages(streams.size());
  for (size_t s = 0; s < streams.size(); ++s)
    for (const PipeStep& step : streams[s])
      stages[s].program.insert(stages[s].program.end(), step.begin(), step.end());
  // Send times not yet received, by (is gradient, from, to).
  std::map<std::tuple<bool, int64_t, int64_t>, std::deque<double>> posted;
  PipeSimulation out;
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      Stage& st = stages[static_cast<size_t>(s)];
      for (; st.next < st.program.size(); ++st.next, progress = true) {
        const I& in = st.program[st.next];
        const bool grad = in.kind == I::SendGrad || in.kind == I::RecvGrad;
        if (in.kind == I::SendActivation || in.kind == I::SendGrad) {
          const int64_t to = ((grad ? s - 1 : s + 1) % p + p) % p;
          posted[{grad, s, to}].push_back(st.clock);
        } else if (in.kind == I::RecvActivation || in.kind == I::RecvGrad) {
          const int64_t from = ((grad ? s + 1 : s - 1) % p + p) % p;
          auto& q = posted[{grad, from, s}];
          if (q.empty()) break;  // blocked until the peer sends
          st.clock = std::max(st.clock, q.front());
          q.pop_front();
          ++out.messages;
        } else {
          const double c = cost_of(in, costs);
          st.clock += c;
          st.busy += c;
          if (in.kind == I::ForwardPass) st.peak = std::max(st.peak, ++st.in_flight);
          if (in.kind == I::BackwardPass || in.kind == I::BackwardInputPass) --st.in_flight;
        }
      }
    }
  }
  for (int64_t s = 0; s < p; ++s) {
    const Stage& st = stages[static_cast<size_t>(s)];
    TS_CHECK(st.next == st.program.size(), "pipeline schedule deadlocks: stage ", s, " waits at ",
             st.program[st.next].str(), " (instruction ", st.next, ") for a send that never comes");
    out.makespan = std::max(out.makespan, st.clock);
    out.busy.push_back(st.busy);
    out.peak_in_flight.push_back(st.peak);
  }
  for (const auto& [key, q] : posted)
    TS_CHECK(q.empty(), "pipeline schedule: stage ", std::get<1>(key), " sends ", q.size(), " ",
             std::get<0>(key) ? "gradient(s)" : "activation(s)", " to stage ", std::get<2>(key),
             " that no receive takes");
  return out;
}

}  // namespace tessera::parallel
