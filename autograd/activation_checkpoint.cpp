#include "tessera/autograd/activation_checkpoint.h"

#include <chrono>

#include "op_util.h"
#include "tessera/autograd/backward.h"
#include "tessera/autograd/split_backward.h"

namespace tessera::autograd {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointHooks& hooks) {
  if (!grad_enabled()) return fn(inputs);
  const GeneratorState rng = default_generator().state();
  const SequenceShard shard = sequence_shard();
  std::vector<Tensor> outputs;
  const auto t0 = std::chrono::steady_clock::now();
  {
    NoGradGuard no_grad;  // nothing inside fn is recorded, so its activations are freed
    outputs = fn(inputs);
  }
  if (hooks.on_forward) hooks.on_forward(seconds_since(t0));
  for (Tensor& o : outputs) o = o.detach();
  std::vector<Tensor> saved_inputs;
  std::vector<std::pair<Shape, Device>> layouts;  // each input's, for unpack
  for (const Tensor& t : inputs) {
    const Tensor kept = ::tessera::detail::untracked(t);
    saved_inputs.push_back(kept.defined() && hooks.pack ? hooks.pack(kept) : kept);
    layouts.emplace_back(t.defined() ? t.shape() : Shape{},
                         t.defined() ? t.device() : Device::cpu());
  }
  std::vector<bool> needs_grad;
  for (const Tensor& t : inputs) needs_grad.push_back(t.defined() && t.requires_grad());
  record(
      "CheckpointBackward", inputs, outputs,
      [fn, saved_inputs, layouts, needs_grad, rng, shard, hooks](const std::vector<Tensor>& grads) {
        // Re-run fn from fresh leaves, replaying the RNG stream and the sequence shard the
        // first run used.
        std::vector<Tensor> leaves;
        for (size_t i = 0; i < saved_inputs.size(); ++i) {
          Tensor leaf;
          if (saved_inputs[i].defined())
            leaf =
                (hooks.unpack ? hooks.unpack(saved_inputs[i], layouts[i].first, layouts[i].second)
                              : saved_inputs[i])
                    .detach();
          if (needs_grad[i]) leaf.requires_grad_(true);
          leaves.push_back(leaf);
        }
        const GeneratorState after = default_generator().state();
        default_generator().set_state(rng);
        std::vector<Tensor> outs;
        const auto t0 = std::chrono::steady_clock::now();
        {
          GradModeGuard enable(true);
          SequenceShardGuard same_chunk(shard.rank, shard.world);
          outs = fn(leaves);
        }
        if (hooks.on_recompute) hooks.on_recompute(seconds_since(t0));
        default_generator().set_state(after);
        std::vector<Tensor> roots, root_grads;
        for (size_t i = 0; i < outs.size(); ++i) {
          if (!outs[i].requires_grad() || !grads[i].defined()) continue;
          roots.push_back(outs[i]);
          root_grads.push_back(grads[i]);
        }
        // Inside a split backward's first part the rerun splits too: the leaves' gradients
        // now, its weights' with the outer rest.
        if (DeferredGrads* outer = split_backward_in_progress(); outer && !roots.empty()) {
          std::vector<Tensor> wanted;
          for (size_t i = 0; i < leaves.size(); ++i)
            if (needs_grad[i]) wanted.push_back(leaves[i]);
          outer->absorb(backward_inputs(roots, root_grads, wanted));
        } else if (!roots.empty()) {
          backward(roots, root_grads);
        }
        std::vector<Tensor> input_grads;
        for (size_t i = 0; i < leaves.size(); ++i)
          input_grads.push_back(needs_grad[i] ? leaves[i].grad() : Tensor());
        return input_grads;
      },
      // Kept inputs are version-checked (an in-place change before backward is an error);
      // packed ones are copies, which nothing else changes, and must not keep the originals.
      hooks.pack ? std::vector<Tensor>{} : inputs);
  return outputs;
}

}  // namespace tessera::autograd
