#include "tessera/autograd/activation_checkpoint.h"

#include "op_util.h"
#include "tessera/autograd/backward.h"

namespace tessera::autograd {

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  const GeneratorState rng = default_generator().state();
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;  // nothing inside fn is recorded, so its activations are freed
    outputs = fn(inputs);
  }
  for (Tensor& o : outputs) o = o.detach();
  std::vector<Tensor> saved_inputs;
  for (const Tensor& t : inputs) saved_inputs.push_back(detail::untracked(t));
  std::vector<bool> needs_grad;
  for (const Tensor& t : inputs) needs_grad.push_back(t.defined() && t.requires_grad());
  record(
      "CheckpointBackward", inputs, outputs,
      [fn, saved_inputs, needs_grad, rng](const std::vector<Tensor>& grads) {
        // Re-run fn from fresh leaves, replaying the RNG stream the first run used.
        std::vector<Tensor> leaves;
        for (size_t i = 0; i < saved_inputs.size(); ++i) {
          Tensor leaf = saved_inputs[i].defined() ? saved_inputs[i].detach() : Tensor();
          if (needs_grad[i]) leaf.requires_grad_(true);
          leaves.push_back(leaf);
        }
        const GeneratorState after = default_generator().state();
        default_generator().set_state(rng);
        std::vector<Tensor> outs;
        {
          GradModeGuard enable(true);
          outs = fn(leaves);
        }
        default_generator().set_state(after);
        std::vector<Tensor> roots, root_grads;
        for (size_t i = 0; i < outs.size(); ++i) {
          if (!outs[i].requires_grad()) continue;
          roots.push_back(outs[i]);
          root_grads.push_back(grads[i]);
        }
        if (!roots.empty()) backward(roots, root_grads);
        std::vector<Tensor> input_grads;
        for (size_t i = 0; i < leaves.size(); ++i)
          input_grads.push_back(needs_grad[i] ? leaves[i].grad() : Tensor());
        return input_grads;
      },
      inputs);
  return outputs;
}

}  // namespace tessera::autograd
