#include "zero3_fetcher.h"

#include <algorithm>

#include "tessera/grad_mode.h"

namespace tessera::parallel {

Zero3Fetcher::Zero3Fetcher(std::shared_ptr<ProcessGroup> group, int64_t prefetch_numel)
    : group_(std::move(group)), prefetch_numel_(prefetch_numel) {}

void Zero3Fetcher::add(Tensor full, Tensor shard) {
  index_[full.storage().get()] = full_.size();
  full_.push_back(std::move(full));
  shards_.push_back(std::move(shard));
}

void Zero3Fetcher::fetch(Storage& s) {
  const size_t i = index_.at(&s);
  if (evaluating_) {
    s.make_resident();
    group_->all_gather(full_[i], shards_[i]);
    return;
  }
  ++stats_.gathers;
  current_.push_back(i);
  if (on_trace_) {
    if (cursor_ < trace_.size() && trace_[cursor_] == i) {
      const size_t position = cursor_++;
      if (!ahead_.empty() && ahead_.front().position == position) {
        Ahead a = std::move(ahead_.front());
        ahead_.pop_front();
        ahead_numel_ -= a.buffer.numel();
        a.work.wait();
        s.adopt(*a.buffer.storage());
        ++stats_.prefetched;
      } else {
        s.make_resident();
        group_->all_gather(full_[i], shards_[i]);
      }
      start_prefetches();
      return;
    }
    leave_trace();
  }
  s.make_resident();
  group_->all_gather(full_[i], shards_[i]);
}

void Zero3Fetcher::used(Storage& s) {
  if (!enabled_ || last_used_ == &s) return;
  if (last_used_) last_used_->release();
  last_used_ = &s;
}

void Zero3Fetcher::start_prefetches() {
  if (prefetch_numel_ <= 0 || !on_trace_) return;
  next_ahead_ = std::max(next_ahead_, cursor_);
  while (next_ahead_ < trace_.size() && ahead_numel_ < prefetch_numel_) {
    const size_t p = trace_[next_ahead_];
    // A parameter still gathered (in use now) or already on its way for an earlier position
    // is released before this position needs it: wait until it is.
    if (full_[p].storage()->resident()) break;
    if (std::any_of(ahead_.begin(), ahead_.end(), [&](const Ahead& a) { return a.param == p; }))
      break;
    Tensor buffer = Tensor::empty(full_[p].shape(), full_[p].dtype(), full_[p].device());
    Work work = group_->all_gather_async(buffer, shards_[p]);
    ahead_.push_back({next_ahead_, p, buffer, std::move(work)});
    ahead_numel_ += buffer.numel();
    ++next_ahead_;
  }
}

void Zero3Fetcher::leave_trace() {
  on_trace_ = false;
  drain();
}

void Zero3Fetcher::drain() {
  for (Ahead& a : ahead_) a.work.wait();
  ahead_.clear();
  ahead_numel_ = 0;
  next_ahead_ = cursor_;
}

void Zero3Fetcher::set_evaluating(bool on) {
  if (on == evaluating_) return;
  if (on) {
    drain();
  } else {
    last_used_ = nullptr;
    for (Tensor& t : full_) t.storage()->release();
  }
  evaluating_ = on;
}

void Zero3Fetcher::end_step() {
  drain();
  // A step that left the trace, or stopped short of its end, is the new trace.
  if (!trace_valid_ || !on_trace_ || cursor_ != trace_.size()) {
    trace_ = current_;
    trace_valid_ = !trace_.empty();
  }
  current_.clear();
  cursor_ = next_ahead_ = 0;
  on_trace_ = trace_valid_;
  last_used_ = nullptr;
  for (Tensor& t : full_) t.storage()->release();
  // Prefetching resumes at the next step's first gather, not here: a run's last step would
  // otherwise gather for a step that never comes.
}

void Zero3Fetcher::materialize_all() {
  drain();
  on_trace_ = false;
  enabled_ = false;
  NoGradGuard no_grad;
  for (Tensor& t : full_) t.data_ptr();
  for (Tensor& t : full_) t.storage()->set_fetcher(nullptr);
}

}  // namespace tessera::parallel
