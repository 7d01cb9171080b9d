// Fused neural-network ops: softmax family, layer_norm, embedding, cross-entropy, dropout.
#include "op_util.h"

namespace tessera {

using autograd::record;
using detail::run1;
using detail::untracked;

namespace {

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  detail::check_floating(op, x);
  if (x.dim() == 0) return softmax_impl(x.view({1}), 0, log).view({});
  dim = wrap_dim(dim, x.dim(), op);
  // Kernels work on the last dim; move `dim` there (a copy only when it is not last).
  const Tensor xt = untracked(x).transpose(dim, -1).contiguous();
  Tensor y =
      run1(log ? Kernel::log_softmax : Kernel::softmax, {xt}, xt.shape(), x.dtype(), x.dtype());
  std::vector<Tensor> outs{y.transpose(dim, -1)};
  record(log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x}, outs,
         [y, dim, log](const std::vector<Tensor>& g) {
           const Tensor gt = g[0].transpose(dim, -1).contiguous();
           Tensor dx = run1(log ? Kernel::log_softmax_backward : Kernel::softmax_backward, {gt, y},
                            y.shape(), y.dtype(), y.dtype());
           return std::vector<Tensor>{dx.transpose(dim, -1)};
         },
         {outs[0]});
  return outs[0];
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, true);
}

namespace {

// x from layer_norm's output y = (x - mean) * rstd * w + b, in the statistics' dtype.
Tensor rebuild_layer_norm_input(const Tensor& y, const Tensor& w, const Tensor& b,
                                const Tensor& mean, const Tensor& rstd) {
  const DType acc = mean.dtype();
  Tensor xhat = cast(y, acc);
  if (b.defined()) xhat = xhat - cast(b, acc);
  xhat = xhat / cast(w, acc);
  return cast(xhat / rstd.unsqueeze(1) + mean.unsqueeze(1), y.dtype());
}

Tensor layer_norm_impl(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias, double eps, bool invertible) {
  detail::check_floating("layer_norm", x);
  const int64_t nd = static_cast<int64_t>(normalized_shape.size());
  TS_CHECK(
      nd >= 1 && nd <= x.dim() && Shape(x.shape().end() - nd, x.shape().end()) == normalized_shape,
      "layer_norm: normalized_shape ", shape_str(normalized_shape),
      " does not match the trailing dims of input ", x.describe());
  for (const Tensor* p : {&weight, &bias})
    TS_CHECK(!p->defined() || (p->shape() == normalized_shape && p->dtype() == x.dtype()),
             "layer_norm: weight/bias must be ", dtype_name(x.dtype()), shape_str(normalized_shape),
             ", got ", p->describe());
  detail::check_same_device("layer_norm", {x, weight, bias});
  const int64_t C = numel_of(normalized_shape), N = C ? x.numel() / C : 0;
  const DType acc = detail::compute_dtype(x.dtype());
  const Tensor x2 = untracked(x).contiguous().view({N, C});
  const Tensor w = weight.defined() ? untracked(weight).contiguous().view({C}) : Tensor();
  const Tensor b = bias.defined() ? untracked(bias).contiguous().view({C}) : Tensor();
  Tensor y = Tensor::empty({N, C}, x.dtype(), x.device());
  Tensor mean = Tensor::empty({N}, acc, x.device()), rstd = Tensor::empty({N}, acc, x.device());
  KernelAttrs a;
  a.scalar = eps;
  {
    const TensorBase ins[3] = {x2, w, b};
    TensorBase outs[3] = {y, mean, rstd};
    run_kernel(Kernel::layer_norm, x.device(), x.dtype(), ins, outs, a);
  }
  std::vector<Tensor> outs{y.view(x.shape())};
  const bool gw = weight.defined() && weight.requires_grad(),
             gb = bias.defined() && bias.requires_grad();
  // Keeping the output instead needs the weight to divide by (a zero entry loses its column);
  // checked only when backward will run (it reads the weight: a device sync on GPUs).
  const bool from_output = invertible && w.defined() && C > 0 && N > 0 && grad_enabled() &&
                           autograd::any_requires_grad({x, weight, bias}) &&
                           amin(abs(w)).item() != 0.0;
  record(
      "LayerNormBackward", {x, weight, bias}, outs,
      [kept = from_output ? y : x2, from_output, w, b, mean, rstd, gw, gb, xshape = x.shape(),
       nshape = normalized_shape](const std::vector<Tensor>& g) {
        const Tensor input = from_output ? rebuild_layer_norm_input(kept, w, b, mean, rstd) : kept;
        const int64_t C = input.shape()[1];
        const Tensor dy = g[0].contiguous().view(input.shape());
        Tensor dx = Tensor::empty(input.shape(), input.dtype(), input.device());
        Tensor dw = gw ? Tensor::empty({C}, input.dtype(), input.device()) : Tensor();
        Tensor db = gb ? Tensor::empty({C}, input.dtype(), input.device()) : Tensor();
        const TensorBase ins[5] = {dy, input, mean, rstd, w};
        TensorBase outs[3] = {dx, dw, db};
        run_kernel(Kernel::layer_norm_backward, input.device(), input.dtype(), ins, outs);
        return std::vector<Tensor>{dx.view(xshape), gw ? dw.view(nshape) : Tensor(),
                                   gb ? db.view(nshape) : Tensor()};
      },
      from_output ? std::vector<Tensor>{outs[0], weight, bias} : std::vector<Tensor>{x, weight});
  return outs[0];
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return layer_norm_impl(x, normalized_shape, weight, bias, eps, false);
}

Tensor layer_norm_invertible(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                             const Tensor& bias, double eps) {
  return layer_norm_impl(x, normalized_shape, weight, bias, eps, true);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  TS_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, dim], got ",
           weight.describe());
  TS_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32,
           "embedding: indices must be int64 or int32, got ", indices.describe());
  detail::check_same_device("embedding", {weight, indices});
  const Tensor idx = untracked(indices).to(DType::Int64).contiguous().view({indices.numel()});
  const Tensor w = untracked(weight).contiguous();
  const int64_t D = weight.shape()[1];
  Tensor y = run1(Kernel::embedding, {w, idx}, {idx.numel(), D}, weight.dtype(), weight.dtype());
  Shape out_shape = indices.shape();
  out_shape.push_back(D);
  std::vector<Tensor> outs{y.view(out_shape)};
  record("EmbeddingBackward", {weight}, outs,
         [idx, wshape = weight.shape()](const std::vector<Tensor>& g) {
           const Tensor g2 = g[0].contiguous().view({idx.numel(), wshape[1]});
           return std::vector<Tensor>{
               run1(Kernel::embedding_backward, {g2, idx}, wshape, g2.dtype(), g2.dtype())};
         });
  return outs[0];
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     double label_smoothing, Reduction reduction) {
  detail::check_floating("cross_entropy", logits);
  TS_CHECK(logits.dim() >= 1, "cross_entropy: logits need a class dimension, got ",
           logits.describe());
  const int64_t C = logits.shape().back(), N = C ? logits.numel() / C : 0;
  TS_CHECK(
      targets.numel() == N && (targets.dtype() == DType::Int64 || targets.dtype() == DType::Int32),
      "cross_entropy: expected int64 targets with ", N, " elements for logits ", logits.describe(),
      ", got ", targets.describe());
  TS_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
           "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  detail::check_same_device("cross_entropy", {logits, targets});
  const DType acc = detail::compute_dtype(logits.dtype());
  const Tensor x = untracked(logits).contiguous().view({N, C});
  const Tensor t = untracked(targets).to(DType::Int64).contiguous().view({N});
  Tensor losses = Tensor::empty({N}, acc, logits.device()),
         lse = Tensor::empty({N}, acc, logits.device());
  KernelAttrs a;
  a.index = ignore_index;
  a.scalar = label_smoothing;
  {
    const TensorBase ins[2] = {x, t};
    TensorBase outs[2] = {losses, lse};
    run_kernel(Kernel::cross_entropy, logits.device(), logits.dtype(), ins, outs, a);
  }
  // Mean over the targets that are not ignored: with none, 0/0 = NaN as torch gives, while
  // the gradient divides by max(count, 1) and so is 0, as torch's is. Sum: the plain sum.
  Tensor count =
      reduction == Reduction::Sum
          ? ones({}, acc, logits.device())
          : sum(ne(t, scalar_tensor(static_cast<double>(ignore_index), DType::Int64, t.device())))
                .to(acc);
  std::vector<Tensor> outs{div(sum(losses), count).to(logits.dtype())};
  count = where(eq(count, zeros_like(count)), ones_like(count), count);
  record("CrossEntropyBackward", {logits}, outs,
         [x, t, lse, count, a, shape = logits.shape()](const std::vector<Tensor>& g) {
           const Tensor scale = div(g[0].to(lse.dtype()), count).expand(lse.shape()).contiguous();
           Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
           const TensorBase ins[4] = {x, t, lse, scale};
           TensorBase outs[1] = {dx};
           run_kernel(Kernel::cross_entropy_backward, x.device(), x.dtype(), ins, outs, a);
           return std::vector<Tensor>{dx.view(shape)};
         },
         {logits});
  return outs[0];
}

namespace {

// Dropout of a contiguous block whose elements use counters seed, offset + i.
Tensor dropout_block(const Tensor& x, double p, GeneratorState s) {
  KernelAttrs a;
  a.scalar = p;
  a.seed = s.seed;
  a.offset = s.offset;
  const Tensor xc = untracked(x).contiguous();
  std::vector<Tensor> outs{run1(Kernel::dropout, {xc}, xc.shape(), x.dtype(), x.dtype(), a)};
  record("DropoutBackward", {x}, outs, [a](const std::vector<Tensor>& g) {
    const Tensor gc = g[0].contiguous();
    return std::vector<Tensor>{run1(Kernel::dropout, {gc}, gc.shape(), gc.dtype(), gc.dtype(), a)};
  });
  return outs[0];
}

}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  TS_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  detail::check_floating("dropout", x);
  return detail::over_dropout_blocks("dropout", x, gen, [&](int64_t row, GeneratorState s) {
    return dropout_block(row < 0 ? x : x.narrow(0, row, 1), p, s);
  });
}

}  // namespace tessera
