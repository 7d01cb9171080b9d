#include "tessera/parallel/activation_checkpointing.h"

#include "dim_collectives.h"

#include <cstdio>
#include <map>
#include <optional>

#include "tessera/cuda.h"
#include "tessera/grad_mode.h"
#include "tessera/ops.h"
#include "tessera/parallel/rng_tracker.h"

namespace tessera::parallel {

ActivationCheckpointing::ActivationCheckpointing(ActivationCheckpointingOptions options,
                                                 std::shared_ptr<ProcessGroup> tensor_parallel)
    : options_(options), tensor_parallel_(std::move(tensor_parallel)) {
  TS_CHECK(options_.number_checkpoints >= 0, "activation_checkpointing.number_checkpoints must be ",
           ">= 1 when set, got ", options_.number_checkpoints);
  TS_CHECK(options_.checkpoint_num_layers >= 1,
           "activation_checkpointing.checkpoint_num_layers must be >= 1, got ",
           options_.checkpoint_num_layers);
  TS_CHECK(!options_.contiguous_memory_optimization || options_.number_checkpoints > 0,
           "activation_checkpointing.contiguous_memory_optimization needs number_checkpoints (the "
           "number of buffers to allocate), as in DeepSpeed");
}

int64_t layers_per_checkpoint(const ActivationCheckpointingOptions& options, int64_t layers) {
  if (options.number_checkpoints > 0)
    return std::max<int64_t>(
        1, (layers + options.number_checkpoints - 1) / options.number_checkpoints);
  return options.checkpoint_num_layers;
}

Tensor ActivationCheckpointing::pack(const Tensor& t, bool partition, size_t index) {
  NoGradGuard no_grad;
  Tensor kept = t.contiguous();
  if (partition) {  // this rank's 1/N of the flattened input (zero-padded to divide)
    const int n = tensor_parallel_->size();
    const int64_t per = (kept.numel() + n - 1) / n, start = tensor_parallel_->rank() * per;
    Tensor padded = zeros({per * n}, kept.dtype(), kept.device());
    padded.narrow(0, 0, kept.numel()).copy_(kept.reshape({-1}));
    kept = padded.narrow(0, start, per).clone();
  }
  if (options_.cpu_checkpointing && kept.device().is_cuda()) {
    Tensor host = Tensor::empty_pinned(kept.shape(), kept.dtype());
    host.copy_(kept);
    kept = host;
  }
  if (options_.contiguous_memory_optimization) {
    TS_CHECK(static_cast<int64_t>(index) < options_.number_checkpoints,
             "activation_checkpointing: the model keeps more than number_checkpoints = ",
             options_.number_checkpoints, " inputs per forward; raise it");
    if (buffers_.size() <= index) buffers_.resize(index + 1);
    Tensor& buf = buffers_[index];
    if (!buf.defined() || buf.numel() < kept.numel() || buf.dtype() != kept.dtype() ||
        buf.device() != kept.device())
      buf = Tensor::empty({kept.numel()}, kept.dtype(), kept.device());
    Tensor slot = buf.narrow(0, 0, kept.numel()).view(kept.shape());
    slot.copy_(kept);
    kept = slot;
  }
  return kept;
}

Tensor ActivationCheckpointing::unpack(const Tensor& kept, const Shape& shape, Device device,
                                       bool partition) const {
  NoGradGuard no_grad;
  Tensor t = kept.device() == device ? kept : kept.to(device);
  if (partition) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    t = dim_gather(t.contiguous(), 0, *tensor_parallel_).narrow(0, 0, numel).view(shape);
  }
  return t;
}

std::vector<Tensor> ActivationCheckpointing::checkpoint(const autograd::CheckpointFn& fn,
                                                        const std::vector<Tensor>& inputs,
                                                        bool partition) {
  if (!grad_enabled()) return fn(inputs);
  if (options_.synchronize_checkpoint_boundary && !inputs.empty() && inputs[0].defined() &&
      inputs[0].device().is_cuda())
    cuda_synchronize();
  if (outstanding_ == 0) next_index_ = 0, next_position_ = 0;  // a new forward
  const size_t position = next_position_++;
  if (profile_.size() <= position) profile_.resize(position + 1);
  ++outstanding_;
  const bool split = partition && options_.partition_activations && tensor_parallel_ &&
                     tensor_parallel_->size() > 1;
  autograd::CheckpointHooks hooks;
  if (split || options_.cpu_checkpointing || options_.contiguous_memory_optimization) {
    hooks.pack = [this, split](const Tensor& t) { return pack(t, split, next_index_++); };
    hooks.unpack = [this, split](const Tensor& kept, const Shape& shape, Device device) {
      return unpack(kept, shape, device, split);
    };
  }
  hooks.on_forward = [this, position](double s) {
    profile_[position].forwards++;
    profile_[position].forward_seconds += s;
  };
  hooks.on_recompute = [this, position](double s) {
    profile_[position].recomputes++;
    profile_[position].recompute_seconds += s;
    --outstanding_;
  };
  // The rerun also replays the RNG tracker's named states (a fork inside fn: Megatron's
  // dropout in model-parallel regions), as DeepSpeed's CheckpointFunction does.
  auto states = std::make_shared<std::optional<std::map<std::string, GeneratorState>>>();
  auto replayed = [fn, states](const std::vector<Tensor>& in) {
    RNGStatesTracker& tracker = get_cuda_rng_tracker();
    if (!*states) {
      *states = tracker.get_states();
      return fn(in);
    }
    const auto after = tracker.get_states();
    tracker.set_states(**states);
    std::vector<Tensor> out = fn(in);
    tracker.set_states(after);
    return out;
  };
  return autograd::checkpoint(replayed, inputs, hooks);
}

Tensor ActivationCheckpointing::checkpoint(const std::function<Tensor(const Tensor&)>& fn,
                                           const Tensor& input, bool partition) {
  return checkpoint([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; },
                    {input}, partition)[0];
}

std::string ActivationCheckpointing::profile_report() const {
  std::string out =
      "activation checkpointing profile (per checkpoint: forward, rerun in backward)\n";
  char line[160];
  for (size_t i = 0; i < profile_.size(); ++i) {
    const CheckpointProfile& p = profile_[i];
    std::snprintf(line, sizeof line,
                  "  checkpoint %zu: %lld forwards %.3f ms, %lld reruns %.3f ms\n", i,
                  static_cast<long long>(p.forwards), 1e3 * p.forward_seconds,
                  static_cast<long long>(p.recomputes), 1e3 * p.recompute_seconds);
    out += line;
  }
  return out;
}

namespace {

Tensor add_defined(const Tensor& a, const Tensor& b) {
  return !a.defined() ? b : !b.defined() ? a : a + b;
}

}  // namespace

Tensor run_layers(ActivationCheckpointing* checkpointing, int64_t layers,
                  const std::function<Tensor(int64_t, const Tensor&)>& layer, const Tensor& x,
                  bool partition, const std::function<Tensor(int64_t)>& side, Tensor* side_total) {
  // Layers [first, last) of `in`: their output and, with `side`, the sum of their scalars.
  const auto run = [layer, side](int64_t first, int64_t last, const Tensor& in) {
    Tensor y = in, sum;
    for (int64_t i = first; i < last; ++i) {
      y = layer(i, y);
      if (side) sum = add_defined(sum, side(i));
    }
    return sum.defined() ? std::vector<Tensor>{y, sum} : std::vector<Tensor>{y};
  };
  const int64_t k = checkpointing ? checkpointing->layers_per_checkpoint(layers) : layers;
  Tensor h = x, total;
  for (int64_t first = 0; first < layers; first += std::max<int64_t>(k, 1)) {
    const int64_t last = std::min(layers, first + k);
    const std::vector<Tensor> out = checkpointing
                                        ? checkpointing->checkpoint(
                                              [run, first, last](const std::vector<Tensor>& in) {
                                                return run(first, last, in[0]);
                                              },
                                              {h}, partition)
                                        : run(first, last, h);
    h = out[0];
    if (out.size() > 1) total = add_defined(total, out[1]);
  }
  if (side_total) *side_total = total;
  return h;
}

}  // namespace tessera::parallel
