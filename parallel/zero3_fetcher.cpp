#include "zero3_fetcher.h"

#include <algorithm>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::parallel {

namespace {
constexpr size_t kNone = SIZE_MAX;
}

Zero3Fetcher::Zero3Fetcher(std::shared_ptr<ProcessGroup> group, Zero3FetchOptions options)
    : group_(std::move(group)), options_(options) {}

void Zero3Fetcher::add(Tensor full, Tensor shard, std::string swap_key) {
  index_[full.storage().get()] = full_.size();
  full_.push_back(std::move(full));
  shards_.push_back(std::move(shard));
  swap_keys_.push_back(std::move(swap_key));
  secondary_.emplace_back();
}

// A use advances the cursor while it follows the trace.
void Zero3Fetcher::record_use(size_t i) {
  if (!current_.empty() && current_.back() == i) return;  // (the same use continues)
  current_.push_back(i);
  if (!on_trace_) return;
  if (cursor_ < trace_.size() && trace_[cursor_] == i) {
    ++cursor_;
    return;
  }
  leave_trace();
}

void Zero3Fetcher::fetch(Storage& s) {
  const size_t i = index_.at(&s);
  // The gathers' own ops (a copy on one rank) write parameters: they are not uses.
  InGather guard(in_gather_);
  if (evaluating_ || !enabled_) return gather_now(i);
  ++stats_.gathers;
  const size_t before = cursor_;
  record_use(i);
  const bool matched = on_trace_ && cursor_ == before + 1;
  // Prefetches for positions already passed are stale (the parameter was reached otherwise).
  while (matched && !ahead_.empty() && ahead_.front().position < before) {
    Ahead stale = std::move(ahead_.front());
    ahead_.pop_front();
    ahead_numel_ -= stale.buffer.numel();
    stale.gather.work.wait();
    if (!stale.gather.secondary) gathered(stale.param);
  }
  if (matched && !ahead_.empty() && ahead_.front().position == before) {
    Ahead a = std::move(ahead_.front());
    ahead_.pop_front();
    ahead_numel_ -= a.buffer.numel();
    finish_gather(a.param, a.buffer, a.gather);
    s.adopt(*a.buffer.storage());
    live_.insert(i);
    live_numel_ += full_[i].numel();
    ++stats_.prefetched;
  } else {
    gather_now(i);
  }
  start_prefetches();
}

void Zero3Fetcher::hit(Storage& s) {
  if (evaluating_ || !enabled_ || in_gather_) return;
  record_use(index_.at(&s));
  start_prefetches();
}

void Zero3Fetcher::used(Storage& s) {
  if (!enabled_ || in_gather_) return;
  const size_t i = index_.at(&s);
  if (last_used_ == i) return;
  if (last_used_ != kNone && !(on_trace_ && !evaluating_ && reused_soon(last_used_)))
    release(last_used_);
  last_used_ = i;
}

bool Zero3Fetcher::reused_soon(size_t param) const {
  // Its first use at or after the cursor, if the elements of the parameters used before it
  // (DeepSpeed's count) stay under the distance.
  const std::vector<size_t>& at = uses_[param];
  const auto next = std::lower_bound(at.begin(), at.end(), cursor_);
  return next != at.end() &&
         elements_before_[*next] - elements_before_[cursor_] < options_.max_reuse_distance;
}

Tensor Zero3Fetcher::shard_for_gather(size_t i) {
  Tensor shard = shards_[i];
  if (!swap_keys_[i].empty()) swapper_->acquire({{swap_keys_[i], shard}});
  if (shard.device() != full_[i].device()) shard = shard.to(full_[i].device());
  return shard;
}

void Zero3Fetcher::gathered(size_t i) {
  if (!swap_keys_[i].empty()) swapper_->discard({{swap_keys_[i], shards_[i]}});
}

Zero3Fetcher::Gather Zero3Fetcher::start_gather(size_t i, Tensor& out) {
  Gather g;
  g.secondary = options_.hpz_group && secondary_[i].defined();
  ProcessGroup& group = g.secondary ? *options_.hpz_group : *group_;
  g.send = g.secondary ? secondary_[i] : shard_for_gather(i);
  if (!options_.quantized) {
    g.work = group.all_gather_async(out, g.send);
    return g;
  }
  g.send = quantize_blocks(g.send, 1, options_.quantize_block, 8);
  g.packed = Tensor::empty({g.send.numel() * group.size()}, DType::Int32, out.device());
  g.work = group.all_gather_async(g.packed, g.send);
  return g;
}

void Zero3Fetcher::finish_gather(size_t i, Tensor& out, Gather& g) {
  g.work.wait();
  const int ranks = g.secondary ? options_.hpz_group->size() : group_->size();
  if (g.packed.defined()) dequantize_blocks_into(out, g.packed, ranks, options_.quantize_block, 8);
  if (g.secondary) return;
  gathered(i);
  if (options_.hpz_group) {  // this rank's part of the whole, for the step's later gathers
    const int64_t part = out.numel() / options_.hpz_group->size();
    secondary_[i] = out.narrow(0, options_.hpz_group->rank() * part, part).clone();
  }
}

void Zero3Fetcher::gather_now(size_t i) {
  full_[i].storage()->make_resident();
  Gather g = start_gather(i, full_[i]);
  finish_gather(i, full_[i], g);
  if (live_.insert(i).second) live_numel_ += full_[i].numel();
  note_live();
}

void Zero3Fetcher::release(size_t i) {
  full_[i].storage()->release();
  if (live_.erase(i)) live_numel_ -= full_[i].numel();
}

void Zero3Fetcher::release_all() {
  for (size_t i = 0; i < full_.size(); ++i) release(i);
}

void Zero3Fetcher::note_live() {
  stats_.peak_live_numel = std::max(stats_.peak_live_numel, live_numel_ + ahead_numel_);
}

void Zero3Fetcher::start_prefetches() {
  if (!on_trace_) return;
  next_ahead_ = std::max(next_ahead_, cursor_);
  // Elements used from the cursor up to next_ahead_.
  int64_t distance = elements_before_[next_ahead_] - elements_before_[cursor_];
  while (options_.prefetch_numel > 0 && next_ahead_ < trace_.size() &&
         ahead_numel_ < options_.prefetch_numel &&
         live_numel_ + ahead_numel_ < options_.max_live_numel) {
    const size_t p = trace_[next_ahead_];
    if (full_[p].storage()->resident()) {
      // Still gathered: kept until this use if it is within the reuse distance (from a later
      // cursor it is nearer still); else it is released first: wait until it is.
      if (distance >= options_.max_reuse_distance) break;
      distance += full_[p].numel();
      ++next_ahead_;
      continue;
    }
    // Already on its way for an earlier position: released before this one needs it.
    if (std::any_of(ahead_.begin(), ahead_.end(), [&](const Ahead& a) { return a.param == p; }))
      break;
    Tensor buffer = Tensor::empty(full_[p].shape(), full_[p].dtype(), full_[p].device());
    Gather g = start_gather(p, buffer);
    ahead_.push_back({next_ahead_, p, buffer, std::move(g)});
    ahead_numel_ += buffer.numel();
    distance += buffer.numel();
    ++next_ahead_;
  }
  note_live();
  read_ahead(next_ahead_);
}

// Swapped shards of the positions after `from` are read while the gathers before them run,
// as far as the swapper's buffers allow.
void Zero3Fetcher::read_ahead(size_t from) {
  if (!swapper_ || !on_trace_) return;
  next_read_ = std::max(next_read_, from);
  for (; next_read_ < trace_.size(); ++next_read_) {
    const size_t p = trace_[next_read_];
    if (swap_keys_[p].empty() || full_[p].storage()->resident()) continue;
    if (!swapper_->prefetch_one({swap_keys_[p], shards_[p]})) return;
  }
}

void Zero3Fetcher::leave_trace() {
  on_trace_ = false;
  drain();
}

void Zero3Fetcher::drain() {
  for (Ahead& a : ahead_) {
    a.gather.work.wait();
    if (!a.gather.secondary) gathered(a.param);
  }
  ahead_.clear();
  ahead_numel_ = 0;
  next_ahead_ = next_read_ = cursor_;
  if (swapper_) swapper_->finish();  // (reads ahead not taken are dropped)
}

void Zero3Fetcher::set_evaluating(bool on) {
  if (on == evaluating_) return;
  if (on) {
    drain();
  } else {
    last_used_ = kNone;
    release_all();
  }
  evaluating_ = on;
}

void Zero3Fetcher::index_trace() {
  elements_before_.assign(trace_.size() + 1, 0);
  uses_.assign(full_.size(), {});
  for (size_t j = 0; j < trace_.size(); ++j) {
    elements_before_[j + 1] = elements_before_[j] + full_[trace_[j]].numel();
    uses_[trace_[j]].push_back(j);
  }
}

void Zero3Fetcher::end_step() {
  drain();
  // A step that left the trace, or stopped short of its end, is the new trace.
  if (!trace_valid_ || !on_trace_ || cursor_ != trace_.size()) {
    trace_ = current_;
    trace_valid_ = !trace_.empty();
    index_trace();
  }
  current_.clear();
  cursor_ = next_ahead_ = next_read_ = 0;
  on_trace_ = trace_valid_;
  last_used_ = kNone;
  release_all();
  // Prefetching resumes at the next step's first gather, not here: a run's last step would
  // otherwise gather for a step that never comes.
}

void Zero3Fetcher::invalidate_secondary() {
  for (Tensor& t : secondary_) t = Tensor();
}

void Zero3Fetcher::materialize_all() {
  drain();
  options_.quantized = false;  // (the whole weights for good: exact, from the primary shards)
  invalidate_secondary();
  InGather guard(in_gather_);
  on_trace_ = false;
  enabled_ = false;
  NoGradGuard no_grad;
  for (Tensor& t : full_) t.data_ptr();
  for (Tensor& t : full_) t.storage()->set_fetcher(nullptr);
}

void Zero3Fetcher::detach_released() {
  drain();
  enabled_ = false;
  // (Each storage holds this fetcher, which holds them: the cycle goes here.)
  for (Tensor& t : full_) t.storage()->set_fetcher(nullptr);
}

}  // namespace tessera::parallel
