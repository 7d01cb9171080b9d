// The public, differentiable op set. Every function records autograd history when grad mode
// is on and any input requires grad; the gradient of each op is defined beside its forward in
// autograd/ops_*.cpp.
#pragma once
#include <optional>
#include <vector>

#include "tessera/rng.h"
#include "tessera/tensor.h"

namespace tessera {

// ---- creation ----
Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::Float32,
            Device device = Device::cpu());
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::Int64,
              Device device = Device::cpu());
Tensor rand(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu(),
            Generator* gen = nullptr);
Tensor randn(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu(),
             Generator* gen = nullptr);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor scalar_tensor(double value, DType dtype = DType::Float32, Device device = Device::cpu());
// Copies host values into a new tensor (values are cast to dtype).
Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                   DType dtype = DType::Float32, Device device = Device::cpu());
Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape,
                   DType dtype = DType::Int64, Device device = Device::cpu());
// Brace lists are floating values: from_vector({1.0, 2.5}, {2}).
Tensor from_vector(std::initializer_list<double> values, const Shape& shape,
                   DType dtype = DType::Float32, Device device = Device::cpu());

// ---- elementwise (NumPy broadcasting, type promotion) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApprox { None, Tanh };
Tensor gelu(const Tensor& x, GeluApprox approximate = GeluApprox::None);
// gelu(x + bias) in one pass (bias [x's last dim]): the values add then gelu give; backward
// keeps x, as gelu alone keeps its input.
Tensor bias_gelu(const Tensor& x, const Tensor& bias, GeluApprox approximate = GeluApprox::None);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);

// ---- comparisons (bool results, not differentiable), selection ----
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---- casts and device moves ----
Tensor cast(const Tensor& x, DType dtype);
Tensor to_device(const Tensor& x, Device device);

// ---- reductions: `dims` empty means all dims ----
Tensor sum(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// Variance with Bessel's `correction` (1 = unbiased, as torch.var's default).
Tensor var(const Tensor& x, std::vector<int64_t> dims = {}, int64_t correction = 1,
           bool keepdim = false);
Tensor norm(const Tensor& x, std::vector<int64_t> dims = {}, bool keepdim = false);  // L2
// float64 [n]: the sum of squares of each tensor (one floating dtype, one device), in one
// multi-tensor launch; gradient-norm clipping uses it. Not differentiable.
Tensor sum_squares(const std::vector<Tensor>& tensors);

// ---- block quantization (ZeRO++; the format in tessera/quantized_blocks.h) ----
// Int32 [segments * quantized_blocks::words(n, block, bits)]: x's elements (a floating
// dtype) as `segments` equal segments of n, each quantized to `bits` (4 or 8) in blocks of
// `block` elements. Not differentiable.
Tensor quantize_blocks(const Tensor& x, int64_t segments, int64_t block, int64_t bits);
// The values back, into `out` (a contiguous floating tensor of segments * n elements, on the
// packed tensor's device).
void dequantize_blocks_into(Tensor& out, const Tensor& packed, int64_t segments, int64_t block,
                            int64_t bits);

// ---- linear algebra ----
// 1-D/2-D/batched matmul with broadcasting batch dims. Transposed views are passed to the
// GEMM as transposed operands, never copied.
Tensor matmul(const Tensor& a, const Tensor& b);

// y = x W^T + b over the last dim of x (W [out, in], b [out] optional). One GEMM forward and
// two backward (dx = dy W, dW = dy^T x), each written straight into its final layout.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// linear(gelu(x), weight, bias) keeping x, not gelu(x), for backward, which recomputes the GELU
// (DeepSpeed's gelu_checkpoint): the same values and gradients, bit for bit, and x.numel() /
// x.size(-1) * weight.size(1) fewer values kept.
Tensor gelu_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
                   GeluApprox approximate = GeluApprox::None);

// ---- neural-network ops ----
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);
// Normalises over the last `normalized_shape.size()` dims; weight/bias optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// layer_norm keeping its output instead of its input (DeepSpeed's normalize_invertible):
// backward rebuilds the input from the output, so gradients equal layer_norm's to rounding.
// A weight with a zero entry cannot be inverted: then the input is kept, as layer_norm does.
Tensor layer_norm_invertible(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                             const Tensor& bias, double eps = 1e-5);
Tensor embedding(const Tensor& weight, const Tensor& indices);
// logits [..., C], targets [...] int64. Mean over the targets that are not ignored (NaN when
// all are, with zero gradients, as torch), or with Reduction::Sum their sum (0 when all are).
enum class Reduction { Mean, Sum };
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::Mean);
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
// residual + dropout(x + bias, p) in one pass (bias [x's last dim], or undefined: residual +
// dropout(x); residual x's shape): the values and mask the ops give (the mask dropout would
// draw); keeps nothing for backward.
Tensor bias_dropout_add(const Tensor& x, const Tensor& bias, const Tensor& residual, double p,
                        bool training = true, Generator* gen = nullptr);
// q [B, H, Tq, D], k/v [B, H, Tk, D]. attn_mask: bool, broadcastable to [B, H, Tq, Tk],
// true = attend. causal masks key j > query i (aligned to the end when Tq < Tk).
// dropout_p > 0: dropout on the attention probabilities (torch's dropout_p: applied whenever
// given), the mask dropout(probs, dropout_p, true, gen) would draw over [B, H, Tq, Tk] (data,
// sequence and head shards as dropout's), inside the fused kernel: no probabilities are kept,
// backward draws the mask again. (On CUDA, until its kernel takes dropout: softmax, dropout
// and matmul as ops, the same mask, the probabilities kept.)
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, bool causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    double dropout_p = 0.0, Generator* gen = nullptr);
// Block-sparse self-attention (DeepSpeed's SparseSelfAttention): q, k [B, H, T, D], v
// [B, H, T, Dv]; layout int64 [H, T / block, T / block] (nn::make_sparsity_layout): scores are
// formed only for the blocks it marks nonzero, the others are never computed (no [T, T]
// matrix). key_padding_mask: bool [B, T], true = attend. causal hides key j > query i. A row
// with nothing to attend to gives 0.
Tensor block_sparse_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& layout, const Tensor& key_padding_mask = {},
                              bool causal = false, std::optional<double> scale = std::nullopt);

// ---- joining and splitting ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

}  // namespace tessera
