// PipelineModule's partition methods: the bounds equal DeepSpeed's partition_uniform and
// partition_balanced (deepspeed/pipe_partitions.json, generate_pipe_schedule_fixtures.py).
#include <doctest/doctest.h>

#include "fixture_util.h"
#include "tessera/parallel/pipe_partition.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
using namespace tessera::parallel;

TEST_CASE("pipe partition: DeepSpeed's bounds") {
  const nlohmann::json fx = test::read_json(TESSERA_FIXTURES_DIR "/deepspeed/pipe_partitions.json");
  REQUIRE(fx["cases"].size() >= 70);
  for (const auto& c : fx["cases"]) {
    CAPTURE(c.dump());
    const auto want = c["bounds"].get<std::vector<int64_t>>();
    const int64_t parts = c["parts"];
    if (c["method"] == "uniform") {
      CHECK(partition_uniform(c["items"].get<int64_t>(), parts) == want);
    } else {
      CHECK(partition_balanced(c["weights"].get<std::vector<double>>(), parts) == want);
    }
  }
}

TEST_CASE("pipe partition: methods by name, as PipelineModule takes them") {
  // An embedding, 4 blocks of 10 parameters, a head: "type:block" puts 2 blocks per stage.
  std::vector<LayerInfo> layers{{"Embedding", 50},        {"TransformerBlock", 10},
                                {"TransformerBlock", 10}, {"TransformerBlock", 10},
                                {"TransformerBlock", 10}, {"LMHead", 0}};
  CHECK(partition_layers("uniform", layers, 2) == std::vector<int64_t>{0, 3, 6});
  CHECK(partition_layers("type:Block", layers, 2) == partition_balanced({0, 1, 1, 1, 1, 0}, 2));
  CHECK(partition_layers("parameters", layers, 2) ==
        partition_balanced({50, 10, 10, 10, 10, 0}, 2));
  CHECK_THROWS_WITH(partition_layers("type:conv", layers, 2),
                    doctest::Contains("'type:conv' found no layer of that type"));
  CHECK_THROWS_WITH(partition_layers("profile", layers, 2),
                    doctest::Contains("method 'profile' is not one of uniform, parameters"));
  CHECK_THROWS_WITH(partition_layers("type:(", layers, 2),
                    doctest::Contains("not a regular expression"));
  CHECK(check_partition({0, 2, 6}, 6, 2) == std::vector<int64_t>{0, 2, 6});
  CHECK_THROWS_WITH(check_partition({0, 4, 2, 6}, 6, 3), doctest::Contains("must not decrease"));
  CHECK_THROWS_WITH(check_partition({0, 6}, 6, 2), doctest::Contains("2 bounds for 2 stages"));
  CHECK_THROWS_WITH(check_partition({1, 3, 6}, 6, 2), doctest::Contains("run from 0 to the 6"));
}

TEST_SUITE_END();
