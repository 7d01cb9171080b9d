// Block quantization (ZeRO++'s quantized weights and gradients): the packed layout is
// tessera/quantized_blocks.h, the kernels backends/*/quantize_blocks.*.
#include "op_util.h"
#include "tessera/ops.h"
#include "tessera/quantized_blocks.h"

namespace tessera {

namespace {

namespace qb = quantized_blocks;

// The element count of one segment, after checking the parameters the kernels rely on.
int64_t segment_numel(const char* op, int64_t numel, int64_t segments, int64_t block,
                      int64_t bits) {
  TS_CHECK(qb::valid_bits(bits), op, ": bits must be 4 or 8, got ", bits);
  TS_CHECK(qb::valid_block(block), op, ": block must be a multiple of 8 from 8 to 2^24, got ",
           block);
  TS_CHECK(segments >= 1 && numel % segments == 0, op, ": ", numel, " elements do not split into ",
           segments, " equal segments");
  return numel / segments;
}

KernelAttrs attrs_of(int64_t segments, int64_t block, int64_t bits) {
  KernelAttrs a;
  a.index = block;
  a.dims = {segments, bits};
  return a;
}

}  // namespace

Tensor quantize_blocks(const Tensor& x, int64_t segments, int64_t block, int64_t bits) {
  detail::check_floating("quantize_blocks", x);
  const int64_t n = segment_numel("quantize_blocks", x.numel(), segments, block, bits);
  Tensor packed = Tensor::empty({segments * qb::words(n, block, bits)}, DType::Int32, x.device());
  const TensorBase ins[1] = {untracked(x).contiguous()};
  TensorBase outs[1] = {packed};
  run_kernel(Kernel::quantize_blocks, x.device(), x.dtype(), ins, outs,
             attrs_of(segments, block, bits));
  return packed;
}

void dequantize_blocks_into(Tensor& out, const Tensor& packed, int64_t segments, int64_t block,
                            int64_t bits) {
  detail::check_floating("dequantize_blocks", out);
  TS_CHECK(out.is_contiguous(), "dequantize_blocks: the output must be contiguous, got ",
           out.describe());
  TS_CHECK(
      packed.dtype() == DType::Int32 && packed.is_contiguous() && packed.device() == out.device(),
      "dequantize_blocks: the packed tensor must be contiguous int32 on ", out.device().str(),
      ", got ", packed.describe());
  const int64_t n = segment_numel("dequantize_blocks", out.numel(), segments, block, bits);
  TS_CHECK(packed.numel() == segments * qb::words(n, block, bits), "dequantize_blocks: ", segments,
           " segments of ", n, " elements in blocks of ", block, " at ", bits, " bits pack into ",
           segments * qb::words(n, block, bits), " words, got ", packed.describe());
  const TensorBase ins[1] = {packed};
  TensorBase outs[1] = {out};
  run_kernel(Kernel::dequantize_blocks, out.device(), out.dtype(), ins, outs,
             attrs_of(segments, block, bits));
}

}  // namespace tessera
