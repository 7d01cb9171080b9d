// Dataset / DistributedSampler / DataLoader / RepeatingLoader: torch's sharding, padding and
// batch counts (fixtures from tests/fixtures/generate_data_loader_fixtures.py, torch's own
// DistributedSampler and DataLoader), the shuffle's properties, resuming mid-epoch, and the
// token windows the GPT corpus is read through.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "../fixture_util.h"
#include "tessera/io/data_loader.h"
#include "tessera/io/token_windows.h"

using namespace tessera;

namespace {

std::shared_ptr<const io::Dataset<int64_t>> numbers(int64_t n) {
  return std::make_shared<io::FunctionDataset<int64_t>>(n, [](int64_t i) { return i; });
}

}  // namespace

TEST_CASE("DistributedSampler and DataLoader match torch's indices and lengths (unshuffled)") {
  const auto fx = test::read_json(TESSERA_FIXTURES_DIR "/data_loader/sampler.json");
  for (const auto& c : fx["cases"]) {
    const int64_t size = c["size"];
    const int replicas = c["replicas"];
    const bool drop_last = c["drop_last"];
    for (int rank = 0; rank < replicas; ++rank) {
      CAPTURE(size);
      CAPTURE(replicas);
      CAPTURE(drop_last);
      CAPTURE(rank);
      const auto& want = c["ranks"][rank];
      io::DistributedSampler s(size, {false, 0, rank, replicas, drop_last});
      CHECK(s.indices(0) == want["indices"].get<std::vector<int64_t>>());
      for (int b = 1; b <= 4; ++b) {
        io::DataLoader<int64_t> loader(numbers(size), {b, false, 0, rank, replicas, drop_last});
        CHECK(loader.size() == want["batches"][std::to_string(b)].get<int64_t>());
        // Batch k of this rank is its contiguous slice of global batch k of the epoch order
        // (torch's order cut or padded to a multiple of the ranks, as its sampler makes it).
        std::vector<int64_t> padded;  // torch's sampler: rank r holds padded[r::replicas]
        for (size_t i = 0; i < c["ranks"][0]["indices"].size(); ++i)
          for (int r = 0; r < replicas; ++r) padded.push_back(c["ranks"][r]["indices"][i]);
        int64_t batches = 0;
        while (auto batch = loader.next()) {
          const int64_t start = batches * b * replicas;
          const int64_t share =
              std::min<int64_t>(b, (static_cast<int64_t>(padded.size()) - start) / replicas);
          CHECK(std::equal(batch->begin(), batch->end(), padded.begin() + start + rank * share));
          CHECK(static_cast<int64_t>(batch->size()) == share);
          ++batches;
        }
        CHECK(batches == loader.size());
      }
    }
  }
}

TEST_CASE("shuffle: a permutation per epoch, seeded, sharded over ranks without overlap") {
  const int64_t n = 1000;
  io::DistributedSampler a(n, {true, 7, 0, 1, false});
  const auto e0 = a.indices(0), e1 = a.indices(1);
  std::vector<int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < n; ++i) REQUIRE(sorted[static_cast<size_t>(i)] == i);
  CHECK(e0 != e1);  // a new order each epoch
  CHECK(io::DistributedSampler(n, {true, 7, 0, 1, false}).indices(0) == e0);  // seeded
  CHECK(io::DistributedSampler(n, {true, 8, 0, 1, false}).indices(0) != e0);
  // Position 0 of a 10-element shuffle is each value about equally often over 2000 seeds
  // (200 expected; 140-260 is more than 4 standard deviations either side).
  std::map<int64_t, int> first;
  for (uint64_t seed = 0; seed < 2000; ++seed)
    ++first[io::DistributedSampler(10, {true, seed, 0, 1, false}).indices(0)[0]];
  CHECK(first.size() == 10);
  for (const auto& entry : first) CHECK(entry.second > 140);
  for (const auto& entry : first) CHECK(entry.second < 260);
  // Three ranks: every-third positions of the same epoch order, padded from its start.
  std::vector<int64_t> merged(1002);
  for (int r = 0; r < 3; ++r) {
    const auto mine = io::DistributedSampler(n, {true, 7, r, 3, false}).indices(0);
    REQUIRE(mine.size() == 334);
    for (size_t i = 0; i < mine.size(); ++i) merged[i * 3 + static_cast<size_t>(r)] = mine[i];
  }
  CHECK(std::equal(e0.begin(), e0.end(), merged.begin()));
  CHECK(merged[1000] == e0[0]);
  CHECK(merged[1001] == e0[1]);
}

TEST_CASE("DataLoader resumes mid-epoch; RepeatingLoader crosses epochs") {
  const io::DataLoaderOptions o{4, true, 3, 1, 2, false};  // rank 1 of 2, 25 items: 13 each
  auto collate = [](std::vector<int64_t> items) {
    int64_t s = 0;
    for (int64_t i : items) s = s * 100 + i;
    return s;  // a batch type of the user's own: one number encoding the items
  };
  io::DataLoader<int64_t, int64_t> straight(numbers(25), o, collate);
  CHECK(straight.size() == 4);
  std::vector<int64_t> want;
  for (int k = 0; k < 11; ++k) {
    auto b = straight.next();
    if (!b) b = straight.next();  // the end of an epoch, then the next one
    want.push_back(*b);
  }
  io::RepeatingLoader<int64_t, int64_t> first(
      io::DataLoader<int64_t, int64_t>(numbers(25), o, collate));
  std::vector<int64_t> got;
  CHECK(first.epoch_batches() == 4);  // what an epoch is to a trial: the loader's 4 batches
  for (int k = 0; k < 6; ++k) got.push_back(first.next());
  const nlohmann::json saved = first.state();
  CHECK(saved == nlohmann::json{{"epoch", 1}, {"batch", 2}});
  io::RepeatingLoader<int64_t, int64_t> resumed(
      io::DataLoader<int64_t, int64_t>(numbers(25), o, collate));
  resumed.set_state(saved);
  for (int k = 6; k < 11; ++k) got.push_back(resumed.next());
  CHECK(got == want);
  CHECK_THROWS_WITH_AS(resumed.set_state({{"epoch", 0}, {"batch", 9}}),
                       doctest::Contains("batch 9 of epoch 0 does not fit 4 batches per epoch"),
                       Error);
  CHECK_THROWS_WITH_AS(
      io::RepeatingLoader<int64_t>(io::DataLoader<int64_t>(numbers(3), {4, false, 0, 0, 1, true})),
      doctest::Contains("yields no batches"), Error);
}

TEST_CASE("token windows: non-overlapping block + 1 tokens, inputs and targets shifted by one") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("tessera-windows-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "t.bin", std::ios::binary);
    for (int32_t i = 0; i < 23; ++i) f.write(reinterpret_cast<const char*>(&i), 4);
  }
  io::TokenFile tokens((dir / "t.bin").string());
  io::TokenWindows w(tokens, 5, "the test split");
  CHECK(w.size() == 4);  // (23 - 1) / 5: windows start at 0, 5, 10, 15; 20 would need 26
  CHECK(w.get(3) == io::TokenWindow{15, 16, 17, 18, 19, 20});
  const auto [x, y] = io::TokenWindows::collate({w.get(0), w.get(2)});
  CHECK(x.to_vector() == std::vector<double>{0, 1, 2, 3, 4, 10, 11, 12, 13, 14});
  CHECK(y.to_vector() == std::vector<double>{1, 2, 3, 4, 5, 11, 12, 13, 14, 15});
  CHECK_THROWS_WITH_AS(io::TokenWindows(tokens, 30, "the test split"),
                       doctest::Contains("the test split has 23 tokens, fewer than one window of "
                                         "block_size + 1 = 31"),
                       Error);
  std::filesystem::remove_all(dir);
}
