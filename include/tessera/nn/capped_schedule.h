// The two rules DeepSpeed's data-pipeline schedules share (CurriculumScheduler for the
// curriculum, RandomLTDScheduler for random-LTD), written once:
//  - fixed_root: floor((t / total)^(1 / degree) * (max - min) + min), rounded down to a multiple
//    of `multiple_of`, at most max (fixed_linear is degree 1);
//  - the value moves to the schedule's only while it is below the maximum, so once there it
//    stays. CappedScheduleReplay replays those updates from the first step, so any step (a
//    resumed run's first) gets what a straight run had.
#pragma once
#include <cstdint>
#include <functional>

namespace tessera::nn {

int64_t fixed_root_schedule(int64_t t, int64_t total, double degree, int64_t min_value,
                            int64_t max_value, int64_t multiple_of);

class CappedScheduleReplay {
 public:
  // `initial`: the value before the first update; updates are numbered from `first`.
  CappedScheduleReplay(int64_t initial, int64_t max_value, int64_t first);
  // The value after the updates first..target (target >= first - 1) by `scheduled`.
  int64_t value_after(int64_t target, const std::function<int64_t(int64_t)>& scheduled);

 private:
  int64_t initial_, max_, first_, current_, updated_to_;
};

}  // namespace tessera::nn
