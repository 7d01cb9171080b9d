// Gradient reduction in buckets, launched from gradient-ready hooks so that communication
// overlaps the rest of backward (DeepSpeed's reduce_bucket_size / overlap_comm).
//
// Buckets are runs of parameters in reverse registration order (the order backward tends to
// finish them). When every gradient of a bucket is ready it is packed into a flat buffer and
// reduced asynchronously:
//   AllReduce (plain data parallelism): every rank ends with the averaged gradients; each
//     parameter's .grad becomes a view of its bucket's flat buffer (contiguous gradients).
//   ReduceScatter (ZeRO 1-3): each rank receives the sum of its own shard of every parameter
//     (ShardLayout), added into its gradient partition; full gradients are freed as soon as
//     their bucket is packed.
// Reductions happen only in backward passes begun with reduce = true (the accumulation
// boundary for DP and ZeRO-1; every micro-step for ZeRO-2/3).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "tessera/parallel/process_group.h"
#include "tessera/parallel/shard_layout.h"
#include "tessera/parallel/zero_config.h"

namespace tessera::parallel {

class QuantizedReduceScatter;  // (parallel/quantized_reduce_scatter.h)

class GradBuckets {
 public:
  enum class Mode { AllReduce, ReduceScatter };
  struct Options {
    int64_t bucket_numel = ZeroConfig().reduce_bucket_size;  // elements per bucket
    bool overlap = true;      // launch from hooks; false: all at the end of backward
    double pre_scale = 1.0;   // multiplies gradients before the reduction
    double post_scale = 1.0;  // AllReduce: multiplies the result
    DType comm_dtype = DType::Float32;
    // ReduceScatter: ZeRO++'s quantized reduction in place of the reduce-scatter (qgZ).
    std::shared_ptr<QuantizedReduceScatter> quantized;
    // ReduceScatter: where each bucket's reduced shard goes instead of being added into the
    // gradient partition (ZeRO-Infinity's gradients in a swap file): the bucket's offset in
    // the partition and its [numel] sum, valid only during the call.
    std::function<void(int64_t offset, const Tensor& reduced)> accumulate;
  };
  // params: the model's parameter slots in registration order. ReduceScatter also takes the
  // layout and this rank's gradient partition (layout.partition_numel, comm dtype), or
  // none with options.accumulate.
  GradBuckets(std::shared_ptr<ProcessGroup> group, std::vector<Tensor*> params, Mode mode,
              Options options, const ShardLayout* layout = nullptr, Tensor grad_partition = {});
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  void begin_backward(bool reduce);
  // Launches what the hooks have not (unused parameters count as zero gradients), waits for
  // every reduction and delivers the results.
  void end_backward();
  // Bytes of the flat buffers this object holds (AllReduce: the gradients themselves).
  int64_t buffer_bytes() const;

  struct State;

 private:
  std::shared_ptr<State> s_;
};

}  // namespace tessera::parallel
