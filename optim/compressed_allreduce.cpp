#include "tessera/optim/compressed_allreduce.h"

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

// Bit i of the result: x[i] >= 0 (sign().add_(1).bool(): zero is +), 32 to a word.
std::vector<int32_t> pack_signs(const float* x, int64_t n) {
  std::vector<int32_t> words(static_cast<size_t>((n + 31) / 32), 0);
  for (int64_t i = 0; i < n; ++i)
    if (!(x[i] < 0.0f)) words[static_cast<size_t>(i / 32)] |= int32_t(uint32_t{1} << (i % 32));
  return words;
}

float sign_at(const std::vector<int32_t>& words, int64_t i) {
  return (static_cast<uint32_t>(words[static_cast<size_t>(i / 32)]) >> (i % 32)) & 1u ? 1.0f
                                                                                      : -1.0f;
}

// error <- x - scale * sign(x); returns the packed signs.
std::vector<int32_t> compress(const float* x, int64_t n, float scale, float* error) {
  for (int64_t i = 0; i < n; ++i) error[i] = x[i] - scale * (x[i] < 0.0f ? -1.0f : 1.0f);
  return pack_signs(x, n);
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
  const int world = transport.world();
  if (world == 1) return;
  const int64_t n = static_cast<int64_t>(buffer.size()), chunk = n / world;
  TS_CHECK(n % world == 0 && worker_error.size() == buffer.size() &&
               static_cast<int64_t>(server_error.size()) == chunk,
           "compressed_all_reduce: a buffer of ", n, ", a worker error of ", worker_error.size(),
           " and a server error of ", server_error.size(), " over ", world, " ranks");
  // Worker: compress buffer + error, send chunk c's signs to rank c.
  for (int64_t i = 0; i < n; ++i) buffer[i] += worker_error[i];
  const float worker_scale = rms_scale(buffer.data(), n);
  std::vector<std::vector<int32_t>> send(static_cast<size_t>(world));
  for (int64_t i = 0; i < n; ++i)
    worker_error[i] = buffer[i] - worker_scale * (buffer[i] < 0.0f ? -1.0f : 1.0f);
  for (int c = 0; c < world; ++c) send[c] = pack_signs(buffer.data() + c * chunk, chunk);
  const std::vector<std::vector<int32_t>> got = transport.all_to_all(send);
  const std::vector<float> worker_scales = transport.all_gather(worker_scale);
  // Server of chunk `rank`: the ranks' scaled signs averaged, plus the server error.
  std::vector<float> server(static_cast<size_t>(chunk), 0.0f);
  const float inv_world = 1.0f / static_cast<float>(world);
  for (int j = 0; j < world; ++j) {
    const float w = worker_scales[j] * inv_world;
    for (int64_t i = 0; i < chunk; ++i) server[i] += sign_at(got[j], i) * w;
  }
  for (int64_t i = 0; i < chunk; ++i) server[i] += server_error[i];
  const float server_scale = rms_scale(server.data(), chunk);
  const std::vector<int32_t> mine =
      compress(server.data(), chunk, server_scale, server_error.data());
  // Every chunk's signs and scale.
  const std::vector<std::vector<int32_t>> chunks = transport.all_gather(mine);
  const std::vector<float> scales = transport.all_gather(server_scale);
  for (int c = 0; c < world; ++c)
    for (int64_t i = 0; i < chunk; ++i) buffer[c * chunk + i] = scales[c] * sign_at(chunks[c], i);
}

}  // namespace tessera::optim
