#include "tessera/rng.h"

#include <cmath>

#include "tessera/error.h"
#include "tessera/philox.h"

namespace tessera {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  const philox::Words r = philox::rounds10({{c[0], c[1], c[2], c[3]}}, k[0], k[1]);
  return {r.w[0], r.w[1], r.w[2], r.w[3]};
}

float philox_uniform(uint64_t seed, uint64_t index) {
  return philox::uniform(seed, index);
}
float philox_packed_uniform(uint64_t seed, uint64_t index) {
  return philox::packed_uniform(philox::draw_packed(seed, index), index);
}
double philox_uniform_f64(uint64_t seed, uint64_t index) {
  return philox::uniform_f64(seed, index);
}
float philox_normal(uint64_t seed, uint64_t index) {
  return static_cast<float>(philox::normal_f64(seed, index));
}
double philox_normal_f64(uint64_t seed, uint64_t index) {
  return philox::normal_f64(seed, index);
}

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = {seed, 0};
}

GeneratorState Generator::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

void Generator::set_state(GeneratorState state) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = state;
}

GeneratorState Generator::reserve(uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  const GeneratorState s = state_;
  state_.offset += n;
  return s;
}

namespace {
DataParallelShard& shard_state() {
  static DataParallelShard s;
  return s;
}
}  // namespace

DataParallelShard make_data_parallel_shard(int rank, int world) {
  TS_CHECK(world >= 1 && rank >= 0 && rank < world, "data-parallel shard: rank ", rank, " of ",
           world);
  return {rank, world};
}

void set_data_parallel_shard(int rank, int world) {
  shard_state() = make_data_parallel_shard(rank, world);
}

DataParallelShard data_parallel_shard() {
  return shard_state();
}

namespace {
SequenceShard& sequence_state() {
  static SequenceShard s;
  return s;
}
}  // namespace

SequenceShard sequence_shard() {
  return sequence_state();
}

SequenceShardGuard::SequenceShardGuard(int rank, int world) : previous_(sequence_state()) {
  TS_CHECK(world >= 1 && rank >= 0 && rank < world, "sequence shard: rank ", rank, " of ", world);
  sequence_state() = {rank, world};
}

SequenceShardGuard::~SequenceShardGuard() {
  sequence_state() = previous_;
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace tessera
