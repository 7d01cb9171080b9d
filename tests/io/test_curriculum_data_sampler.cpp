// DeepSpeed's data-efficiency sampler: the clusters DeepSpeedDataSampler forms at every step
// (fixtures from tests/fixtures/generate_data_sampling_fixtures.py, DeepSpeed's own class on
// index files its own MMapIndexedDatasetBuilder wrote), the properties of the draws (only
// admitted samples, every sample of a cluster once before any twice, full batches), resuming,
// the index files read and written byte for byte as DeepSpeed's, their damage named by file and
// offset, and the vocabulary-rarity metric against its float64 formula.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "../fixture_util.h"
#include "tessera/io/curriculum_data_sampler.h"
#include "tessera/io/files.h"
#include "tessera/io/window_metrics.h"

using namespace tessera;

namespace {

const std::string kDir = TESSERA_FIXTURES_DIR "/deepspeed/data_sampling";

// A case's metrics in DeepSpeed's order (its difficulties' order).
std::vector<io::CurriculumMetric> fixture_metrics(const nlohmann::json& c) {
  std::vector<io::CurriculumMetric> out;
  for (const std::string name : c["order"]) {
    const nlohmann::json& m = c["metrics"][name];
    io::CurriculumMetric c;
    c.name = name;
    c.percentile = m["difficulty_type"] == "percentile";
    c.single_cluster = m["clustering_type"] == "single_cluster";
    c.max_difficulty = m["max_difficulty"];
    if (!c.single_cluster) {
      c.index_to_sample =
          io::read_indexed_dataset(kDir + "/" + m["index_to_sample_path"].get<std::string>(), name);
      if (!c.percentile)
        c.index_to_metric =
            io::read_metric_values(kDir + "/" + m["index_to_metric_path"].get<std::string>(), name);
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

std::string temp_dir(const char* name) {
  const auto d = std::filesystem::temp_directory_path() /
                 (std::string("tessera-") + name + "-" + std::to_string(::getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace

TEST_CASE("the sampler forms DeepSpeedDataSampler's clusters at every step") {
  const auto fx = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/data_sampling.json");
  for (const auto& item : fx["cases"].items()) {
    const std::string name = item.key();
    const nlohmann::json& c = item.value();
    CAPTURE(name);
    io::CurriculumDataSampler s(fx["samples"], fixture_metrics(c), fx["global_batch"], 1234);
    for (const auto& step : c["steps"]) {
      const auto batch = s.next_global_batch(step["difficulties"].get<std::vector<int64_t>>());
      CAPTURE(s.step());
      CHECK(batch.size() == fx["global_batch"].get<size_t>());
      REQUIRE(s.cluster_sizes().size() == step["clusters"].size());
      for (size_t i = 0; i < step["clusters"].size(); ++i)
        CHECK(s.cluster_samples(i) == step["clusters"][i].get<std::vector<int64_t>>());
    }
  }
}

TEST_CASE("the draws read only admitted samples, each cluster's once before any twice") {
  const auto fx = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/data_sampling.json");
  const auto values = fx["values"].get<std::vector<int64_t>>();
  io::CurriculumDataSampler s(60, fixture_metrics(fx["cases"]["value"]), 8, 99);
  // Difficulty 3 for 40 steps: one growing set of samples with value <= 3 (two clusters).
  std::map<int64_t, int64_t> seen;
  for (int step = 0; step < 41; ++step) {
    const std::vector<int64_t> batch = s.next_global_batch({step == 0 ? 2 : 3});
    CHECK(batch.size() == 8);
    for (int64_t id : batch) {
      CHECK(values.at(static_cast<size_t>(id)) <= 3);
      ++seen[id];
    }
  }
  int64_t admitted = 0;
  for (int64_t v : values) admitted += v <= 3;
  CHECK(static_cast<int64_t>(seen.size()) == admitted);  // every admitted sample was read
  // 40 x 8 reads over both clusters: no sample read more than one pass's worth above another
  // of its cluster (a cluster is read in full before it is reshuffled).
  for (size_t c = 0; c < 2; ++c) {
    int64_t lo = INT64_MAX, hi = 0;
    for (int64_t id : s.cluster_samples(c))
      lo = std::min(lo, seen[id]), hi = std::max(hi, seen[id]);
    CHECK(hi - lo <= 1);
  }
}

TEST_CASE("a sampler restored from its state draws what the straight one draws") {
  const auto fx = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/data_sampling.json");
  const auto& metrics = fx["cases"]["both"];
  const auto& steps = fx["cases"]["both"]["steps"];
  io::CurriculumDataSampler straight(60, fixture_metrics(metrics), 8, 5);
  nlohmann::json saved;
  std::vector<std::vector<int64_t>> after;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto d = steps[i]["difficulties"].get<std::vector<int64_t>>();
    const auto b = straight.next_global_batch(d);
    if (i == 6) saved = nlohmann::json::parse(straight.state().dump());
    if (i > 6) after.push_back(b);
  }
  io::CurriculumDataSampler resumed(60, fixture_metrics(metrics), 8, 5);
  resumed.set_state(saved);
  CHECK(resumed.step() == 7);
  for (size_t i = 7; i < steps.size(); ++i)
    CHECK(resumed.next_global_batch(steps[i]["difficulties"].get<std::vector<int64_t>>()) ==
          after[i - 7]);
  // Another dataset's metrics (the value metric alone) do not form the saved clusters.
  io::CurriculumDataSampler other(60, fixture_metrics(fx["cases"]["value"]), 8, 5);
  CHECK_THROWS_WITH(other.set_state(saved), doctest::Contains("difficulties for 1 metrics"));
  auto grown = saved;
  grown["clusters"][0]["size"] = 4u;
  io::CurriculumDataSampler third(60, fixture_metrics(metrics), 8, 5);
  CHECK_THROWS_WITH(third.set_state(grown),
                    doctest::Contains("the checkpoint belongs to another dataset or curriculum"));
}

TEST_CASE("no admitted sample and ids past the dataset are errors naming them") {
  const auto fx = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/data_sampling.json");
  io::CurriculumDataSampler s(60, fixture_metrics(fx["cases"]["value"]), 8, 1);
  CHECK_THROWS_WITH(s.next_global_batch({-1}),
                    doctest::Contains("at curriculum step 1 no training sample is admitted"));
  CHECK_THROWS_WITH(io::CurriculumDataSampler(50, fixture_metrics(fx["cases"]["value"]), 8, 1),
                    doctest::Contains("but the training data has 50 samples"));
}

TEST_CASE("index files: DeepSpeed's read, Tessera's written byte for byte as DeepSpeed's") {
  CHECK(io::read_indexed_dataset(kDir + "/signed", "signed") ==
        io::IndexedRows{{-5, 3, 120}, {}, {-128}});
  CHECK(io::read_indexed_dataset(kDir + "/wide", "wide") == io::IndexedRows{{0, 65535}, {300}});
  const std::string dir = temp_dir("indexed");
  for (const char* name : {"signed", "wide", "value_index_to_sample", "value_index_to_metric",
                           "ranked_index_to_sample"}) {
    CAPTURE(name);
    const auto rows = io::read_indexed_dataset(kDir + "/" + name, name);
    io::write_indexed_dataset(dir + "/" + name, rows);
    CHECK(bytes_of(dir + "/" + name + ".bin") == bytes_of(kDir + "/" + name + ".bin"));
    CHECK(bytes_of(dir + "/" + name + ".idx") == bytes_of(kDir + "/" + name + ".idx"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a damaged index file is an error naming the file and the offset") {
  const std::string dir = temp_dir("damaged");
  const std::string good = bytes_of(kDir + "/wide.idx"), bin = bytes_of(kDir + "/wide.bin");
  auto damaged = [&](std::string idx, std::string data, const std::string& message) {
    std::ofstream(dir + "/d.idx", std::ios::binary) << idx;
    std::ofstream(dir + "/d.bin", std::ios::binary) << data;
    CHECK_THROWS_WITH(io::read_indexed_dataset(dir + "/d", "'key'"),
                      doctest::Contains(message.c_str()));
  };
  std::string magic = good;
  magic[0] = 'X';
  damaged(magic, bin, "not a DeepSpeed MMapIndexedDataset index");
  std::string version = good;
  version[9] = 2;
  damaged(version, bin, "version 2 at byte 9");
  std::string code = good;
  code[17] = 42;
  damaged(code, bin, "dtype code 42 at byte 17");
  std::string rows = good;
  rows[25] = 0x7f;  // a row count near 2^63
  damaged(rows, bin, "need more than its");
  damaged(good, bin.substr(0, 3), "runs past the end of");
  damaged(good.substr(0, 20), bin, "34-byte header");
  CHECK_THROWS_WITH(io::read_indexed_dataset(dir + "/missing", "'key'"),
                    doctest::Contains("missing.idx"));
  CHECK_THROWS_WITH(io::read_metric_values(kDir + "/wide", "'key'"),
                    doctest::Contains("row 0 holds 2 values, expected 1"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("vocabularyrarity: floor of the window's summed -ln(count / tokens), cached") {
  const std::string dir = temp_dir("rarity");
  // 9 tokens: id 0 four times, 1 three times, 2 and 3 once; windows of 2 input tokens.
  const std::vector<int32_t> ids{0, 0, 1, 2, 0, 1, 3, 0, 1};
  {
    std::ofstream out(dir + "/train.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(int32_t));
  }
  const io::TokenFile tokens(dir + "/train.bin");
  auto r = [](double count) { return -std::log(count / 9.0); };
  const std::vector<int64_t> want{
      static_cast<int64_t>(std::floor(r(4) + r(4))), static_cast<int64_t>(std::floor(r(3) + r(1))),
      static_cast<int64_t>(std::floor(r(4) + r(3))), static_cast<int64_t>(std::floor(r(1) + r(4)))};
  CHECK(io::vocabulary_rarity(tokens, 2) == want);
  const io::MetricIndex made =
      io::cached_window_metric(dir + "/metrics", "vocabularyrarity", tokens, 2);
  const io::MetricIndex want_index = io::index_by_value(want);
  CHECK(made.index_to_metric == want_index.index_to_metric);
  CHECK(made.index_to_sample == want_index.index_to_sample);
  const auto cached = dir + "/metrics/vocabularyrarity-block2_index_to_sample.idx";
  REQUIRE(std::filesystem::exists(cached));
  const auto written = std::filesystem::last_write_time(cached);
  const io::MetricIndex again =
      io::cached_window_metric(dir + "/metrics", "vocabularyrarity", tokens, 2);
  CHECK(again.index_to_sample == made.index_to_sample);
  CHECK(std::filesystem::last_write_time(cached) == written);  // read, not rewritten
  std::filesystem::remove_all(dir);
}
