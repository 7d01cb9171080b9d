#include "tessera/optim/compressed_allreduce.h"

#include <bit>
#include <cmath>
#include <numeric>

#include "tessera/error.h"

namespace tessera::optim {

namespace {

// sqrt(sum of squares) / sqrt(n) in float32, as torch.linalg.norm(x) / np.sqrt(x.numel()).
float rms_scale(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(static_cast<float>(std::sqrt(s)) / std::sqrt(static_cast<double>(n)));
}

// Bit i of the result: x[i] >= 0 (sign().add_(1).bool(): zero is +), 32 to a word. (Whole
// words without branches or divisions, so the compiler vectorises them.)
std::vector<int32_t> pack_signs(const float* x, int64_t n) {
  std::vector<int32_t> words(static_cast<size_t>((n + 31) / 32), 0);
  for (int64_t w = 0; w < n / 32; ++w) {
    const float* p = x + w * 32;
    uint32_t bits = 0;
    for (uint32_t b = 0; b < 32; ++b) bits |= static_cast<uint32_t>(!(p[b] < 0.0f)) << b;
    words[static_cast<size_t>(w)] = static_cast<int32_t>(bits);
  }
  for (int64_t i = n / 32 * 32; i < n; ++i)
    if (!(x[i] < 0.0f)) words[static_cast<size_t>(i / 32)] |= int32_t(uint32_t{1} << (i % 32));
  return words;
}

// sign(i) * w, the sign read from bit i of `words` (+w or -w exactly, as 1.0f * w).
inline float signed_value(const int32_t* words, int64_t i, float w) {
  return (static_cast<uint32_t>(words[i >> 5]) >> (i & 31)) & 1u ? w : -w;
}

// out[i] += sign(i) * w for i < n (a word's 32 at a time, so the compiler vectorises them).
void add_signs(const int32_t* words, int64_t n, float w, float* out) {
  for (int64_t k = 0; k < n / 32; ++k) {
    const auto bits = static_cast<uint32_t>(words[k]);
    float* o = out + k * 32;
    for (uint32_t b = 0; b < 32; ++b) o[b] += (bits >> b) & 1u ? w : -w;
  }
  for (int64_t i = n / 32 * 32; i < n; ++i) out[i] += signed_value(words, i, w);
}

// out[i] = sign(i) * scale for i < n.
void expand_signs(const int32_t* words, int64_t n, float scale, float* out) {
  for (int64_t k = 0; k < n / 32; ++k) {
    const auto bits = static_cast<uint32_t>(words[k]);
    float* o = out + k * 32;
    for (uint32_t b = 0; b < 32; ++b) o[b] = (bits >> b) & 1u ? scale : -scale;
  }
  for (int64_t i = n / 32 * 32; i < n; ++i) out[i] = signed_value(words, i, scale);
}

// error <- x - scale * sign(x) (0 counts as +).
void keep_error(const float* x, int64_t n, float scale, float* error) {
  for (int64_t i = 0; i < n; ++i) error[i] = x[i] - (x[i] < 0.0f ? -scale : scale);
}

// error <- x - scale * sign(x); returns the packed signs.
std::vector<int32_t> compress(const float* x, int64_t n, float scale, float* error) {
  keep_error(x, n, scale, error);
  return pack_signs(x, n);
}

// A message: each tensor's scale as its float bits, then each tensor's packed signs.
void append_scales(std::vector<int32_t>& message, const std::vector<float>& scales) {
  for (float s : scales) message.push_back(std::bit_cast<int32_t>(s));
}
void append(std::vector<int32_t>& message, const std::vector<int32_t>& words) {
  message.insert(message.end(), words.begin(), words.end());
}

}  // namespace

int64_t onebit_padded_size(int64_t n, int world) {
  TS_CHECK(n >= 0 && world >= 1, "onebit_padded_size: n ", n, ", world ", world);
  const int64_t divider = static_cast<int64_t>(world) * 8 / std::gcd(world, 8);
  const int64_t unit = world * divider;
  return (n + unit - 1) / unit * unit;
}

void compressed_all_reduce(std::vector<float>& buffer, std::vector<float>& worker_error,
                           std::vector<float>& server_error, OneBitTransport& transport) {
  compressed_all_reduce({{&buffer, &worker_error, &server_error}}, transport);
}

void compressed_all_reduce(const std::vector<CompressedBuffer>& items, OneBitTransport& transport) {
  const int world = transport.world();
  if (world == 1 || items.empty()) return;
  const size_t T = items.size();
  std::vector<int64_t> chunks(T), offsets(T);  // each tensor's chunk, and its words' offset
  int64_t offset = static_cast<int64_t>(T);    // (after the T scale words)
  for (size_t t = 0; t < T; ++t) {
    const CompressedBuffer& b = items[t];
    const int64_t n = static_cast<int64_t>(b.buffer->size());
    chunks[t] = n / world;
    TS_CHECK(n % world == 0 && b.worker_error->size() == b.buffer->size() &&
                 static_cast<int64_t>(b.server_error->size()) == chunks[t],
             "compressed_all_reduce: a buffer of ", n, ", a worker error of ",
             b.worker_error->size(), " and a server error of ", b.server_error->size(), " over ",
             world, " ranks");
    offsets[t] = offset;
    offset += (chunks[t] + 31) / 32;
  }
  // Worker: compress each buffer + its error; chunk c of every tensor goes to rank c.
  std::vector<float> worker_scales(T);
  for (size_t t = 0; t < T; ++t) {
    std::vector<float>& x = *items[t].buffer;
    std::vector<float>& e = *items[t].worker_error;
    const int64_t n = static_cast<int64_t>(x.size());
    for (int64_t i = 0; i < n; ++i) x[i] += e[i];
    worker_scales[t] = rms_scale(x.data(), n);
    keep_error(x.data(), n, worker_scales[t], e.data());
  }
  std::vector<std::vector<int32_t>> send(static_cast<size_t>(world));
  for (int c = 0; c < world; ++c) {
    append_scales(send[c], worker_scales);
    for (size_t t = 0; t < T; ++t)
      append(send[c], pack_signs(items[t].buffer->data() + c * chunks[t], chunks[t]));
  }
  const std::vector<std::vector<int32_t>> got = transport.all_to_all(send);
  // Server of chunk `rank` of each tensor: the ranks' scaled signs averaged, plus its error.
  const float inv_world = 1.0f / static_cast<float>(world);
  std::vector<float> server_scales(T);
  std::vector<std::vector<int32_t>> server_signs(T);
  for (size_t t = 0; t < T; ++t) {
    const int64_t chunk = chunks[t];
    std::vector<float> server(static_cast<size_t>(chunk), 0.0f);
    for (int j = 0; j < world; ++j) {
      const float w = std::bit_cast<float>(got[j][t]) * inv_world;
      add_signs(got[j].data() + offsets[t], chunk, w, server.data());
    }
    std::vector<float>& server_error = *items[t].server_error;
    for (int64_t i = 0; i < chunk; ++i) server[i] += server_error[i];
    server_scales[t] = rms_scale(server.data(), chunk);
    server_signs[t] = compress(server.data(), chunk, server_scales[t], server_error.data());
  }
  std::vector<int32_t> mine;
  append_scales(mine, server_scales);
  for (const auto& words : server_signs) append(mine, words);
  // Every chunk's signs and scale.
  const std::vector<std::vector<int32_t>> all = transport.all_gather(mine);
  for (size_t t = 0; t < T; ++t) {
    std::vector<float>& x = *items[t].buffer;
    for (int c = 0; c < world; ++c) {
      expand_signs(all[c].data() + offsets[t], chunks[t], std::bit_cast<float>(all[c][t]),
                   x.data() + c * chunks[t]);
    }
  }
}

}  // namespace tessera::optim
