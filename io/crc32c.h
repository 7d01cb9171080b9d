// CRC-32C (Castagnoli), the checksum of TFRecord framing in TensorBoard event files. Debian 12
// packages no C/C++ CRC-32C library, so it is written here: the SSE4.2 crc32 instruction where
// the build targets it, else a byte table.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tessera::io {

// The CRC of `size` bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// The table implementation (the fallback), for tests that compare both.
uint32_t crc32c_table(const void* data, size_t size, uint32_t crc = 0);
// TFRecord's masked form: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);

}  // namespace tessera::io
