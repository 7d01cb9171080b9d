// Loading one rank's ZeRO partition from a checkpoint saved at another data-parallel size
// reads only the saved shard files that overlap it. The checkpoint is written here by hand:
// parameter a = [0, 1, 2, 3, 4], b = [[10, 11, 12], [13, 14, 15]], optimizer slot
// "<p>.exp_avg" = 2 * p, cut into 4 shards of 2 elements (a's last shard all padding).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>

#include "tessera/io/files.h"
#include "tessera/io/safetensors.h"
#include "tessera/ops.h"
#include "tessera/parallel/zero_checkpoint.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
using namespace tessera::parallel;
namespace fs = std::filesystem;

namespace {

const std::vector<double> kA = {0, 1, 2, 3, 4}, kB = {10, 11, 12, 13, 14, 15};
const std::vector<std::pair<std::string, Shape>> kParams = {{"a", {5}}, {"b", {2, 3}}};

// Saved rank q's shard of `whole` (zero-padded), times `factor`.
Tensor saved_shard(const std::vector<double>& whole, int q, double factor) {
  std::vector<double> s(2, 0.0);
  for (int i = 0; i < 2; ++i)
    if (2 * q + i < static_cast<int>(whole.size())) s[i] = factor * whole[2 * q + i];
  return from_vector(s, {2});
}

fs::path write_checkpoint() {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-zero-ckpt-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const ShardLayout saved(kParams, 4);
  const std::string meta = nlohmann::json{{"zero", zero_metadata(3, saved)}}.dump();
  io::write_file_atomically((dir / "engine.json").string(),
                            [&](std::ostream& out) { out << meta; });
  for (int q = 0; q < 4; ++q)
    io::save_safetensors((dir / zero_shard_file(q)).string(),
                         {{"a", saved_shard(kA, q, 1)},
                          {"b", saved_shard(kB, q, 1)},
                          {"a.exp_avg", saved_shard(kA, q, 2)},
                          {"b.exp_avg", saved_shard(kB, q, 2)},
                          {"step", full({}, 7.0, DType::Int64)}});
  return dir;
}

std::vector<double> expect(const std::vector<double>& whole, int64_t from, int64_t n, double f) {
  std::vector<double> out;
  for (int64_t i = from; i < from + n; ++i)
    out.push_back(i < static_cast<int64_t>(whole.size()) ? f * whole[static_cast<size_t>(i)] : 0);
  return out;
}

}  // namespace

TEST_CASE("a ZeRO partition loads from only the saved shards that overlap it") {
  const fs::path dir = write_checkpoint();
  const ShardLayout two(kParams, 2);  // shards of 3 elements

  // Rank 1 of 2 (elements 3..5) needs saved ranks 1 and 2 (a: 2..3 and 4; b: 2..3 and 4..5).
  fs::rename(dir / zero_shard_file(0), dir / "hidden0");
  fs::rename(dir / zero_shard_file(3), dir / "hidden3");
  ConsolidatedState c = load_zero_partition(dir.string(), two, 1);
  CHECK(c.world_size == 4);
  CHECK(c.masters.at("a").to_vector() == expect(kA, 3, 3, 1));
  CHECK(c.masters.at("b").to_vector() == expect(kB, 3, 3, 1));
  CHECK(c.optimizer.at("b.exp_avg").to_vector() == expect(kB, 3, 3, 2));
  CHECK(c.optimizer.at("step").item() == 7.0);
  // Rank 0 of 2 needs saved rank 0, which is gone: the error names the file.
  CHECK_THROWS_WITH(load_zero_partition(dir.string(), two, 0),
                    doctest::Contains("zero_rank0.safetensors' is missing"));
  fs::rename(dir / "hidden0", dir / zero_shard_file(0));

  // At the size it was saved with, rank 2 reads its own file only.
  fs::rename(dir / zero_shard_file(0), dir / "hidden0");
  fs::rename(dir / zero_shard_file(1), dir / "hidden1");
  const ShardLayout four(kParams, 4);
  c = load_zero_partition(dir.string(), four, 2);
  CHECK(c.masters.at("a").to_vector() == expect(kA, 4, 2, 1));
  CHECK(c.optimizer.at("a.exp_avg").to_vector() == expect(kA, 4, 2, 2));
  CHECK(c.masters.at("b").to_vector() == expect(kB, 4, 2, 1));

  // One rank of one: everything, from every file.
  for (int q : {0, 1, 3})
    fs::rename(dir / ("hidden" + std::to_string(q)), dir / zero_shard_file(q));
  c = load_zero_partition(dir.string(), ShardLayout(kParams, 1), 0);
  CHECK(c.masters.at("a").to_vector() == kA);
  CHECK(c.optimizer.at("b.exp_avg").to_vector() == expect(kB, 0, 6, 2));
  fs::remove_all(dir);
}

TEST_SUITE_END();
