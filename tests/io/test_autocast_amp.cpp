// DeepSpeed's "torch_autocast" section: DeepSpeed's dtype spellings (its DtypeEnum in
// deepspeed/runtime/config.py, transcribed) mapped to Tessera's bf16 / fp16 mixed precision
// (fp16 with torch.amp.GradScaler's schedule: 2^16, doubling after 2000 clean steps, halving on
// every overflow), and the settings Tessera cannot honour refused by name.
#include <doctest/doctest.h>

#include <string>

#include "tessera/error.h"
#include "tessera/io/train_config.h"

using namespace tessera;

namespace {

io::TrainConfig parse(const std::string& sections) {
  return io::TrainConfig::parse(R"({"train_micro_batch_size_per_gpu": 1, )" + sections + "}", 1,
                                "autocast.json");
}

std::string error_of(const std::string& sections) {
  try {
    parse(sections);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("torch_autocast: DeepSpeed's dtype names map to bf16 or fp16 mixed precision") {
  for (const char* name : {"bfloat16", "bf16", "torch.bfloat16"}) {
    CAPTURE(name);
    const auto c =
        parse(R"("torch_autocast": {"enabled": true, "dtype": ")" + std::string(name) + R"("})");
    CHECK(c.bf16);
    CHECK(!c.fp16.enabled);
    CHECK(c.model_dtype() == DType::BFloat16);
    CHECK(c.warnings.empty());
  }
  for (const char* name : {"float16", "fp16", "half", "torch.float16"}) {
    CAPTURE(name);
    const auto c =
        parse(R"("torch_autocast": {"enabled": true, "dtype": ")" + std::string(name) + R"("})");
    CHECK(c.fp16.enabled);
    CHECK(c.fp16.loss_scale == 0);  // dynamic
    CHECK(c.fp16.initial_scale_power == 16);
    CHECK(c.fp16.loss_scale_window == 2000);
    CHECK(c.fp16.hysteresis == 1);
    CHECK(c.model_dtype() == DType::Float16);
  }
  for (const char* on : {R"("enabled": true, "dtype": "float32")", R"("enabled": false)",
                         R"("dtype": "bfloat16")"}) {
    CAPTURE(on);
    const auto c = parse(R"("torch_autocast": {)" + std::string(on) + "}");
    CHECK(c.model_dtype() == DType::Float32);
  }
  // DeepSpeed's default module list is what Tessera does anyway.
  CHECK(
      parse(R"("torch_autocast": {"enabled": true, "dtype": "bf16", "lower_precision_safe_modules":
              ["torch.nn.modules.linear.Linear", "torch.nn.modules.conv.Conv2d"]})")
          .bf16);
}

TEST_CASE("torch_autocast: what Tessera cannot do is an error naming the key") {
  CHECK(
      error_of(R"("torch_autocast": {"enabled": true})").find("'torch_autocast.dtype' is needed") !=
      std::string::npos);
  CHECK(error_of(R"("torch_autocast": {"enabled": true, "dtype": "int8"})")
            .find("'torch_autocast.dtype' is \"int8\", expected bfloat16 or float16") !=
        std::string::npos);
  CHECK(
      error_of(R"("bf16": {"enabled": true}, "torch_autocast": {"enabled": true, "dtype": "fp16"})")
          .find("'torch_autocast.enabled' and 'bf16.enabled' cannot both be true") !=
      std::string::npos);
  CHECK(error_of(R"("torch_autocast": {"enabled": true, "dtype": "bf16",
                 "lower_precision_safe_modules": ["torch.nn.modules.normalization.LayerNorm"]})")
            .find("'torch_autocast.lower_precision_safe_modules' names "
                  "\"torch.nn.modules.normalization.LayerNorm\"") != std::string::npos);
  CHECK(error_of(R"("torch_autocast": {"lower_precision_safe_modules": "Linear"})")
            .find("must be a list of module class names") != std::string::npos);
  CHECK(error_of(R"("torch_autocast": {"enabled": "yes"})").find("torch_autocast.enabled") !=
        std::string::npos);
}

TEST_CASE("amp (Apex): O1 and O2 train as fp16 with Apex's dynamic scale, O0 as float32") {
  for (const char* level : {"O1", "O2"}) {
    CAPTURE(level);
    const auto c = parse(R"("amp": {"enabled": true, "opt_level": ")" + std::string(level) +
                         R"(", "min_loss_scale": 0.5, "keep_batchnorm_fp32": true})");
    CHECK(c.amp);
    CHECK(c.fp16.enabled);
    CHECK(c.fp16.loss_scale == 0);
    CHECK(c.fp16.initial_scale_power == 16);
    CHECK(c.fp16.loss_scale_window == 2000);
    CHECK(c.fp16.hysteresis == 1);
    CHECK(c.fp16.min_loss_scale == 0.5);
    CHECK(c.warnings.empty());
  }
  CHECK(parse(R"("amp": {"enabled": true})").fp16.enabled);  // Apex's default O1
  CHECK(parse(R"("amp": {"enabled": true, "loss_scale": 128})").fp16.loss_scale == 128);
  CHECK(parse(R"("amp": {"enabled": true, "max_loss_scale": 16777216})").fp16.enabled);
  CHECK(parse(R"("amp": {"enabled": true, "opt_level": "O0"})").model_dtype() == DType::Float32);
  CHECK(!parse(R"("amp": {"enabled": false, "opt_level": "O2"})").amp);
}

TEST_CASE("amp (Apex): what Tessera cannot do, and amp with ZeRO, are errors naming the key") {
  const auto has = [](const std::string& sections, const std::string& text) {
    const std::string e = error_of(sections);
    CAPTURE(e);
    return e.find(text) != std::string::npos;
  };
  CHECK(has(R"("amp": {"enabled": true, "opt_level": "O3"})", "'amp.opt_level' is \"O3\""));
  CHECK(has(R"("amp": {"enabled": true, "loss_scale": "auto"})", "'amp.loss_scale' is \"auto\""));
  CHECK(has(R"("amp": {"enabled": true, "max_loss_scale": 1024})", "'amp.max_loss_scale' is"));
  CHECK(has(R"("amp": {"enabled": true, "master_weights": false})", "'amp.master_weights'"));
  CHECK(has(R"("amp": {"enabled": true, "num_losses": 2})", "'amp.num_losses' is 2"));
  CHECK(has(R"("amp": {"enabled": true, "cast_model_type": "float16"})", "cast_model_type"));
  CHECK(has(R"("fp16": {"enabled": true}, "amp": {"enabled": true})",
            "'amp.enabled' and 'fp16.enabled' cannot both be true"));
  CHECK(has(R"("amp": {"enabled": true}, "zero_optimization": {"stage": 2})",
            "Amp and ZeRO are not compatible"));
}
