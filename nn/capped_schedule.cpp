#include "tessera/nn/capped_schedule.h"

#include <algorithm>
#include <cmath>

#include "tessera/error.h"

namespace tessera::nn {

int64_t fixed_root_schedule(int64_t t, int64_t total, double degree, int64_t min_value,
                            int64_t max_value, int64_t multiple_of) {
  const double fraction =
      std::pow(static_cast<double>(t) / static_cast<double>(total), 1.0 / degree);
  auto next = static_cast<int64_t>(std::floor(
      fraction * static_cast<double>(max_value - min_value) + static_cast<double>(min_value)));
  next -= next % multiple_of;
  return std::min(next, max_value);
}

CappedScheduleReplay::CappedScheduleReplay(int64_t initial, int64_t max_value, int64_t first)
    : initial_(initial),
      max_(max_value),
      first_(first),
      current_(initial),
      updated_to_(first - 1) {}

int64_t CappedScheduleReplay::value_after(int64_t target,
                                          const std::function<int64_t(int64_t)>& scheduled) {
  TS_CHECK(target >= first_ - 1, "schedule: update ", target, " comes before the first, ", first_);
  if (target < updated_to_) {  // an earlier step (a resume): replay from the start
    current_ = initial_;
    updated_to_ = first_ - 1;
  }
  for (int64_t t = updated_to_ + 1; t <= target; ++t) {
    if (current_ >= max_) {  // DeepSpeed stops updating at the maximum
      updated_to_ = target;
      break;
    }
    current_ = scheduled(t);
    updated_to_ = t;
  }
  return current_;
}

}  // namespace tessera::nn
