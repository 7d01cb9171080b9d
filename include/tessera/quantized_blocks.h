// The packed form of a block-quantized tensor (ZeRO++'s quantized weights and gradients):
// symmetric quantization per block of `block` elements with r = 2^(bits-1) - 1 (127 at 8
// bits, 7 at 4): the scale s = max|x| / r, the codes q = round_half_even((x * r) / max|x|) (the
// division last: one rounding), in [-r, r], read back as q * s (a block of zeros: s = 1, codes 0; a
// block holding a NaN or an infinity: s = NaN, codes 0, so it comes back NaN). DeepSpeed's kernel
// divides by 2^(bits-1) instead and clamps, which shrinks each block's largest value by one step (a
// LayerNorm gain of 1 came back 0.992); here the largest value comes back exactly.
//
// One segment of n elements packs into 32-bit words: its codes (two's complement, `bits` bits
// each, 8-bit codes one per byte, 4-bit codes two per byte, the lower nibble first; each block
// starting on a byte), padded with zeros to a whole word, then one float32 scale per block.
// Segments follow one another, so the packed shards of every rank, gathered, are the packed
// gathered tensor.
#pragma once
#include <cstdint>

#include "tessera/host_device.h"

namespace tessera::quantized_blocks {

// Elements per scale where a caller does not choose (DeepSpeed's weight quantizer aims at
// 4-8k; smaller blocks track the values closer for 0.2% more bytes).
inline constexpr int64_t kDefaultBlock = 2048;

inline bool valid_bits(int64_t bits) {
  return bits == 4 || bits == 8;
}
// Blocks start on a byte whatever the bits: a multiple of 8 elements.
inline bool valid_block(int64_t block) {
  return block >= 8 && block % 8 == 0 && block <= (1 << 24);
}
inline int64_t blocks(int64_t n, int64_t block) {
  return (n + block - 1) / block;
}
inline int64_t code_bytes(int64_t n, int64_t bits) {
  return (n * bits + 7) / 8;
}
inline int64_t code_words(int64_t n, int64_t bits) {
  return (code_bytes(n, bits) + 3) / 4;
}
// 32-bit words of one packed segment of n elements.
inline int64_t words(int64_t n, int64_t block, int64_t bits) {
  return code_words(n, bits) + blocks(n, block);
}

// Code e of a segment whose codes start at `codes` (two's complement, as laid out above).
TS_HOST_DEVICE inline int code_at(const uint8_t* codes, int64_t e, int64_t bits) {
  if (bits == 8) return static_cast<int8_t>(codes[e]);
  const int nibble = (codes[e / 2] >> (4 * (e % 2))) & 0xf;
  return nibble >= 8 ? nibble - 16 : nibble;
}

}  // namespace tessera::quantized_blocks
