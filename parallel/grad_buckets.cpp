#include "tessera/parallel/grad_buckets.h"

#include <deque>

#include "quantized_reduce_scatter.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::parallel {

struct GradBuckets::State {
  struct Bucket {
    std::vector<size_t> params;  // registration order
    int64_t numel = 0;           // AllReduce: sum of numels; ReduceScatter: sum of shards
    int64_t part_offset = 0;     // ReduceScatter: where the bucket starts in a partition
    Tensor flat;                 // AllReduce: the bucket's gradients (persistent)
    size_t ready = 0;
    bool launched = false;
    Work work;
  };
  struct Slot {  // ReduceScatter staging: input [world * numel], output [numel]
    Tensor in, out;
    int bucket = -1;
    Work work;
  };

  std::shared_ptr<ProcessGroup> group;
  std::vector<Tensor*> params;
  Mode mode;
  Options opt;
  const ShardLayout* layout = nullptr;
  Tensor partition;
  std::vector<Bucket> buckets;
  std::vector<size_t> bucket_of, offset_in_bucket;
  std::vector<bool> ready;
  std::vector<Slot> slots;
  std::deque<size_t> in_flight;  // slots in launch order
  std::vector<size_t> launch_order;
  bool reducing = false;

  void on_ready(size_t i) {
    if (!reducing || ready[i]) return;
    ready[i] = true;
    Bucket& b = buckets[bucket_of[i]];
    if (++b.ready == b.params.size() && opt.overlap) launch(bucket_of[i]);
  }

  void launch(size_t bi) {
    NoGradGuard no_grad;
    Bucket& b = buckets[bi];
    b.launched = true;
    launch_order.push_back(bi);
    if (mode == Mode::AllReduce) {
      for (size_t i : b.params) {
        const Tensor g = params[i]->grad();
        Tensor dst =
            b.flat.narrow(0, static_cast<int64_t>(offset_in_bucket[i]), params[i]->numel());
        if (g.defined())
          dst.copy_(g.reshape({-1}));
        else
          dst.zero_();
        params[i]->set_grad(Tensor());
      }
      if (opt.pre_scale != 1.0) b.flat.mul_(opt.pre_scale);
      b.work = group->all_reduce_async(b.flat);
      return;
    }
    Slot& s = free_slot();
    s.bucket = static_cast<int>(bi);
    const int world = group->size();
    Tensor in = s.in.narrow(0, 0, b.numel * world);
    in.zero_();
    for (size_t i : b.params) {
      const ShardLayout::Entry& e = layout->entries[i];
      const Tensor g = params[i]->grad();
      if (!g.defined()) continue;
      const Tensor flat = g.reshape({-1});
      for (int q = 0; q < world; ++q) {
        const int64_t len = e.valid(q);
        if (len == 0) continue;
        in.narrow(0, q * b.numel + static_cast<int64_t>(offset_in_bucket[i]), len)
            .copy_(flat.narrow(0, q * e.shard, len));
      }
      params[i]->set_grad(Tensor());  // the full gradient is no longer needed
    }
    if (opt.pre_scale != 1.0) in.mul_(opt.pre_scale);
    if (opt.quantized) {  // (two all-to-alls, done here: the slot completes at once)
      opt.quantized->run(s.out.narrow(0, 0, b.numel), in);
      s.work = Work();
    } else {
      s.work = group->reduce_scatter_async(s.out.narrow(0, 0, b.numel), in);
    }
    in_flight.push_back(static_cast<size_t>(&s - slots.data()));
  }

  Slot& free_slot() {
    for (Slot& s : slots)
      if (s.bucket < 0) return s;
    complete_oldest();
    return free_slot();
  }

  void complete_oldest() {
    NoGradGuard no_grad;
    Slot& s = slots[in_flight.front()];
    in_flight.pop_front();
    s.work.wait();
    const Bucket& b = buckets[static_cast<size_t>(s.bucket)];
    if (opt.accumulate)
      opt.accumulate(b.part_offset, s.out.narrow(0, 0, b.numel));
    else
      partition.narrow(0, b.part_offset, b.numel).add_(s.out.narrow(0, 0, b.numel));
    s.bucket = -1;
  }
};

GradBuckets::GradBuckets(std::shared_ptr<ProcessGroup> group, std::vector<Tensor*> params,
                         Mode mode, Options options, const ShardLayout* layout,
                         Tensor grad_partition)
    : s_(std::make_shared<State>()) {
  State& s = *s_;
  s.group = std::move(group);
  s.params = std::move(params);
  s.mode = mode;
  s.opt = options;
  s.layout = layout;
  s.partition = std::move(grad_partition);
  const size_t n = s.params.size();
  TS_CHECK(mode == Mode::AllReduce ||
               (layout && layout->entries.size() == n &&
                (options.accumulate ||
                 (s.partition.defined() && s.partition.numel() == layout->partition_numel))),
           "GradBuckets: ReduceScatter needs a layout and a gradient partition that match the ", n,
           " parameters");
  const int world = s.group->size();
  const Device device = n > 0 ? s.params[0]->device() : Device::cpu();
  s.bucket_of.assign(n, 0);
  s.offset_in_bucket.assign(n, 0);
  s.ready.assign(n, false);
  // Reverse registration order, cut at bucket_numel (at least one parameter per bucket).
  int64_t filled = 0;
  for (size_t k = n; k-- > 0;) {
    const int64_t cost =
        mode == Mode::AllReduce ? s.params[k]->numel() : layout->entries[k].shard * world;
    if (s.buckets.empty() || (filled + cost > options.bucket_numel && filled > 0)) {
      s.buckets.emplace_back();
      filled = 0;
    }
    s.buckets.back().params.insert(s.buckets.back().params.begin(), k);
    filled += cost;
  }
  int64_t max_numel = 0;
  for (size_t bi = 0; bi < s.buckets.size(); ++bi) {
    State::Bucket& b = s.buckets[bi];
    if (mode == Mode::ReduceScatter) b.part_offset = layout->entries[b.params.front()].offset;
    for (size_t i : b.params) {
      s.bucket_of[i] = bi;
      if (mode == Mode::AllReduce) {
        s.offset_in_bucket[i] = static_cast<size_t>(b.numel);
        b.numel += s.params[i]->numel();
      } else {
        s.offset_in_bucket[i] = static_cast<size_t>(layout->entries[i].offset - b.part_offset);
        b.numel += layout->entries[i].shard;
      }
    }
    if (mode == Mode::AllReduce) b.flat = zeros({b.numel}, options.comm_dtype, device);
    max_numel = std::max(max_numel, b.numel);
  }
  if (mode == Mode::ReduceScatter) {
    s.slots.resize(std::min<size_t>(2, s.buckets.size()));
    for (auto& slot : s.slots) {
      slot.in = Tensor::empty({max_numel * world}, options.comm_dtype, device);
      slot.out = Tensor::empty({max_numel}, options.comm_dtype, device);
    }
  }
  std::weak_ptr<State> weak = s_;
  for (size_t i = 0; i < n; ++i)
    s.params[i]->register_hook([weak, i](const Tensor&) {
      if (auto st = weak.lock()) st->on_ready(i);
    });
}

GradBuckets::~GradBuckets() = default;

void GradBuckets::begin_backward(bool reduce) {
  State& s = *s_;
  s.reducing = reduce;
  std::fill(s.ready.begin(), s.ready.end(), false);
  s.launch_order.clear();
  for (auto& b : s.buckets) {
    b.ready = 0;
    b.launched = false;
  }
}

void GradBuckets::end_backward() {
  State& s = *s_;
  if (!s.reducing) return;
  s.reducing = false;
  for (size_t bi = 0; bi < s.buckets.size(); ++bi)
    if (!s.buckets[bi].launched) s.launch(bi);
  NoGradGuard no_grad;
  if (s.mode == Mode::ReduceScatter) {
    while (!s.in_flight.empty()) s.complete_oldest();
    return;
  }
  for (size_t bi : s.launch_order) {
    State::Bucket& b = s.buckets[bi];
    b.work.wait();
    if (s.opt.post_scale != 1.0) b.flat.mul_(s.opt.post_scale);
    for (size_t i : b.params) {
      Tensor* p = s.params[i];
      Tensor g = b.flat.narrow(0, static_cast<int64_t>(s.offset_in_bucket[i]), p->numel())
                     .view(p->shape());
      p->set_grad(g.dtype() == p->dtype() ? g : g.to(p->dtype()));
    }
  }
}

int64_t GradBuckets::buffer_bytes() const {
  int64_t total = 0;
  auto bytes = [](const Tensor& t) { return t.defined() ? t.nbytes() : 0; };
  for (const auto& b : s_->buckets) total += bytes(b.flat);
  for (const auto& sl : s_->slots) total += bytes(sl.in) + bytes(sl.out);
  return total;
}

}  // namespace tessera::parallel
