// Config sections owned by their subsystems (io/config_section_registry.h): a section of one's
// own is one struct with a parser and one RegisterConfigSection line, and the config reader
// then reads it with the rest of the file (defaults when absent, errors naming the key and the
// file, unknown keys reported and refused under strict, its cross-section rule run); ZeRO's
// section is one (parallel::ZeroConfig), whose defaults the ZeRO optimizer and the gradient
// buckets take.
#include <doctest/doctest.h>

#include <map>

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/activation_checkpointing.h"
#include "tessera/parallel/grad_buckets.h"
#include "tessera/parallel/zero_config.h"
#include "tessera/parallel/zero_optimizer.h"

using namespace tessera;

namespace {

struct ToyConfig {
  int64_t width = 4;
  std::string mode = "fast";
  bool stated = false;  // (the check below concerns files that state the section)
  static void parse(io::config::Section& s, ToyConfig& c) {
    c.stated = true;
    s.notes({{"", "a toy section"}, {"width", "parts the batch splits into"}});
    s.get_min<int64_t>("width", c.width, 1, "a positive integer");
    s.get("mode", c.mode);
    TS_CHECK(c.mode == "fast" || c.mode == "slow", s.source(), ": 'toy.mode' is \"", c.mode,
             "\", expected \"fast\" or \"slow\"");
  }
};

// A rule spanning sections: the batch must split into `width` parts.
void check_toy(io::TrainConfig& c) {
  if (!c.section<ToyConfig>().stated) return;
  TS_CHECK(c.train_batch_size % c.section<ToyConfig>().width == 0, c.source, ": 'toy.width' ",
           c.section<ToyConfig>().width, " does not divide train_batch_size ", c.train_batch_size);
}

const io::RegisterConfigSection<ToyConfig> kToySection{"toy", check_toy};

io::TrainConfig parse(const std::string& rest) {
  return io::TrainConfig::parse(R"({"train_batch_size": 8)" + rest + "}", 1, "cfg.json");
}

}  // namespace

TEST_CASE("a config section of one's own: one struct and one registration line") {
  CHECK(parse("").section<ToyConfig>().width == 4);  // absent: its defaults
  const io::TrainConfig c = parse(R"(, "toy": {"width": 2, "mode": "slow"})");
  CHECK(c.section<ToyConfig>().width == 2);
  CHECK(c.section<ToyConfig>().mode == "slow");
  io::TrainConfig copy = c;  // a copy owns its sections
  copy.section<ToyConfig>().width = 8;
  CHECK(c.section<ToyConfig>().width == 2);

  CHECK_THROWS_WITH_AS(parse(R"(, "toy": {"width": 0})"),
                       doctest::Contains("cfg.json: 'toy.width' is 0, expected a positive integer"),
                       Error);
  CHECK_THROWS_WITH_AS(parse(R"(, "toy": {"mode": "medium"})"),
                       doctest::Contains("'toy.mode' is \"medium\""), Error);
  CHECK_THROWS_WITH_AS(parse(R"(, "toy": {"width": 3})"),
                       doctest::Contains("'toy.width' 3 does not divide train_batch_size 8"),
                       Error);
  const io::TrainConfig unknown = parse(R"(, "toy": {"widht": 2})");
  REQUIRE(unknown.unknown_keys.size() == 1);
  CHECK(unknown.unknown_keys[0] == "'toy.widht' (did you mean 'toy.width'?)");
  CHECK_THROWS_WITH_AS(parse(R"(, "strict": true, "toy": {"widht": 2})"),
                       doctest::Contains("toy.widht"), Error);
  CHECK_THROWS_WITH_AS(parse(R"(, "toy": 5)"), doctest::Contains("'toy' must be an object"), Error);
  CHECK_THROWS_WITH_AS(io::RegisterConfigSection<ToyConfig>("toy2"),
                       doctest::Contains("is registered twice"), Error);
  // The config reference (`tessera config-keys`) lists its keys with their defaults.
  std::map<std::string, io::config::ConfigKey> ref;
  for (const io::config::ConfigKey& k : io::TrainConfig::describe_keys()) ref[k.key] = k;
  REQUIRE(ref.count("toy.width"));
  CHECK(ref.at("toy").kind == "object");
  CHECK(ref.at("toy.width").kind == "integer");
  CHECK(ref.at("toy.width").default_value == "4");
  CHECK(ref.at("toy.width").expected == "a positive integer");
  CHECK(ref.at("toy.mode").default_value == "\"fast\"");
  CHECK(ref.at("toy").note == "a toy section");  // (the reference's lines: the section's own)
  CHECK(ref.at("toy.width").note == "parts the batch splits into");
}

TEST_CASE("zero_optimization is parallel's section; its defaults are written once") {
  const parallel::ZeroConfig defaults;
  // DeepSpeed's (deepspeed/runtime/zero/config.py): 5e8-element buckets, 1e5 persistence.
  CHECK(defaults.reduce_bucket_size == 500000000);
  CHECK(defaults.allgather_bucket_size == 500000000);
  CHECK(defaults.stage3_param_persistence_threshold == 100000);
  CHECK(defaults.stage3_prefetch_bucket_size == 50000000);
  const parallel::ZeroOptions zo;
  CHECK(zo.reduce_bucket_size == defaults.reduce_bucket_size);
  CHECK(zo.allgather_bucket_size == defaults.allgather_bucket_size);
  CHECK(zo.param_persistence_threshold == defaults.stage3_param_persistence_threshold);
  CHECK(zo.prefetch_bucket_size == defaults.stage3_prefetch_bucket_size);
  CHECK(parallel::GradBuckets::Options().bucket_numel == defaults.reduce_bucket_size);

  const io::TrainConfig c = parse(R"(, "zero_optimization": {"stage": 2,
      "reduce_bucket_size": 1000, "offload_optimizer": {"device": "cpu"}})");
  CHECK(parallel::zero_config(c).stage == 2);
  CHECK(parallel::zero_config(c).reduce_bucket_size == 1000);
  CHECK(parallel::zero_config(c).offload_optimizer_device == "cpu");
  CHECK(parallel::zero_config(parse("")).stage == 0);
  CHECK_THROWS_WITH_AS(parse(R"(, "zero_optimization": {"stage": 4})"),
                       doctest::Contains("cfg.json: 'zero_optimization.stage' is 4, expected 0, "
                                         "1, 2 or 3"),
                       Error);
  // Its cross-section rule: fp16's hysteresis has no effect at stage 0 (warned).
  const io::TrainConfig h = parse(R"(, "fp16": {"enabled": true, "hysteresis": 4})");
  bool warned = false;
  for (const auto& w : h.warnings)
    warned |= w.find("'fp16.hysteresis' has no effect") != std::string::npos;
  CHECK(warned);
  const io::TrainConfig u = parse(R"(, "zero_optimization": {"stgae": 1})");
  REQUIRE(u.unknown_keys.size() == 1);
  CHECK(u.unknown_keys[0].find("did you mean 'zero_optimization.stage'") != std::string::npos);
}

TEST_CASE("activation_checkpointing is parallel's section: the runtime's options themselves") {
  CHECK_FALSE(parallel::activation_checkpointing_config(parse("")).enabled);
  const io::TrainConfig c = parse(R"(, "activation_checkpointing": {"partition_activations": true,
      "number_checkpoints": 3, "contiguous_memory_optimization": true})");
  const auto& a = parallel::activation_checkpointing_config(c);
  CHECK(a.enabled);  // the section is present
  CHECK(a.partition_activations);
  CHECK(a.number_checkpoints == 3);
  CHECK(a.checkpoint_num_layers == 1);  // Megatron's default
  CHECK(parallel::layers_per_checkpoint(a, 12) == 4);
  CHECK_THROWS_WITH_AS(parse(R"(, "activation_checkpointing": {
      "contiguous_memory_optimization": true})"),
                       doctest::Contains("'activation_checkpointing.contiguous_memory_"
                                         "optimization' needs 'number_checkpoints'"),
                       Error);
}
