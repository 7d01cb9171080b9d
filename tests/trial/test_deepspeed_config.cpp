// Determined's overwrite_deepspeed_config (merge_dicts) on hand-made configs, the duplicate-key
// check of DeepSpeed's loader, and dotted hyperparameters as overrides.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "tessera/error.h"
#include "tessera/trial/deepspeed_config.h"

using namespace tessera;
using nlohmann::json;

TEST_CASE("overwrite_deepspeed_config: nested objects merge, other values replace or add") {
  const json base = json::parse(R"({"train_batch_size": 16,
    "optimizer": {"type": "Adam", "params": {"lr": 0.001, "betas": [0.9, 0.999]}},
    "fp16": {"enabled": false}})");
  const json source = json::parse(R"({"optimizer": {"params": {"lr": 0.01}},
    "fp16": {"enabled": true, "loss_scale": 0}, "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 2}})");
  const json want = json::parse(R"({"train_batch_size": 16,
    "optimizer": {"type": "Adam", "params": {"lr": 0.01, "betas": [0.9, 0.999]}},
    "fp16": {"enabled": true, "loss_scale": 0}, "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 2}})");
  CHECK(trial::overwrite_deepspeed_config(base, source) == want);
  // A list is a leaf: it replaces the base's whole list.
  CHECK(trial::overwrite_deepspeed_config(base, json::parse(R"({"optimizer": {"params":
          {"betas": [0.8]}}})"))["optimizer"]["params"]["betas"] == json::parse("[0.8]"));
  CHECK_THROWS_WITH_AS(
      trial::overwrite_deepspeed_config(base, json::parse(R"({"train_batch_size": {"x": 1}})")),
      doctest::Contains("'train_batch_size' is an object in the overrides but 16"), Error);
}

TEST_CASE("overwrite_deepspeed_config from a file: duplicate keys are refused") {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string good = (dir / "tessera-ds-good.json").string();
  const std::string dup = (dir / "tessera-ds-dup.json").string();
  std::ofstream(good) << R"({"train_batch_size": 8, "optimizer": {"params": {"lr": 1}}})";
  std::ofstream(dup) << R"({"optimizer": {"params": {"lr": 1, "lr": 2}}})";
  CHECK(trial::overwrite_deepspeed_config(good, json::parse(R"({"train_batch_size": 4})")) ==
        json::parse(R"({"train_batch_size": 4, "optimizer": {"params": {"lr": 1}}})"));
  CHECK_THROWS_WITH_AS(trial::overwrite_deepspeed_config(dup, json::object()),
                       doctest::Contains("key 'lr' appears twice"), Error);
  CHECK_THROWS_WITH_AS(trial::overwrite_deepspeed_config(dir.string() + "/nope.json", {}),
                       doctest::Contains("nope.json"), Error);
  std::filesystem::remove(good);
  std::filesystem::remove(dup);
}

TEST_CASE("dotted hyperparameters become nested overrides") {
  const std::map<std::string, json> hp{{"optimizer.params.lr", 0.01},
                                       {"model.dropout", 0.1},
                                       {"config", "configs/quickstart.json"},
                                       {"global_batch_size", 32},
                                       {"steps_per_print", 5}};
  CHECK(trial::overrides_from_hparams(hp, {"config", "global_batch_size"}) ==
        json::parse(R"({"optimizer": {"params": {"lr": 0.01}}, "model": {"dropout": 0.1},
                        "steps_per_print": 5})"));
  CHECK_THROWS_WITH_AS(trial::overrides_from_hparams({{"model", 1}, {"model.dropout", 0.1}}),
                       doctest::Contains("'model' is also given a value"), Error);
  CHECK_THROWS_WITH_AS(trial::overrides_from_hparams({{"a..b", 1}}),
                       doctest::Contains("an empty part"), Error);
}
