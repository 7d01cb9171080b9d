#include "tessera/nn/deepspeed_transformer_config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "tessera/error.h"

namespace tessera::nn {

namespace {

constexpr const char* kName = "DeepSpeedTransformerConfig.";

using Setter = std::function<void(DeepSpeedTransformerConfig&, const nlohmann::json&)>;

Setter integer(int64_t DeepSpeedTransformerConfig::*field, const std::string& key) {
  return [field, key](DeepSpeedTransformerConfig& c, const nlohmann::json& v) {
    TS_CHECK(v.is_number_integer(), kName, key, " must be an integer, got ", v.dump());
    c.*field = v.get<int64_t>();
  };
}

Setter real(double DeepSpeedTransformerConfig::*field, const std::string& key) {
  return [field, key](DeepSpeedTransformerConfig& c, const nlohmann::json& v) {
    TS_CHECK(v.is_number(), kName, key, " must be a number, got ", v.dump());
    c.*field = v.get<double>();
  };
}

Setter flag(bool DeepSpeedTransformerConfig::*field, const std::string& key) {
  return [field, key](DeepSpeedTransformerConfig& c, const nlohmann::json& v) {
    TS_CHECK(v.is_boolean(), kName, key, " must be true or false, got ", v.dump());
    c.*field = v.get<bool>();
  };
}

// Every key, in DeepSpeed's argument order (plus bf16 and huggingface).
const std::vector<std::pair<std::string, Setter>>& setters() {
  using C = DeepSpeedTransformerConfig;
  static const std::vector<std::pair<std::string, Setter>> table = [] {
    std::vector<std::pair<std::string, Setter>> t;
    auto add = [&t](const std::string& key, auto make, auto field) {
      t.emplace_back(key, make(field, key));
    };
    add("batch_size", integer, &C::batch_size);
    add("max_seq_length", integer, &C::max_seq_length);
    add("hidden_size", integer, &C::hidden_size);
    add("intermediate_size", integer, &C::intermediate_size);
    add("heads", integer, &C::heads);
    add("attn_dropout_ratio", real, &C::attn_dropout_ratio);
    add("hidden_dropout_ratio", real, &C::hidden_dropout_ratio);
    add("num_hidden_layers", integer, &C::num_hidden_layers);
    add("initializer_range", real, &C::initializer_range);
    add("layer_norm_eps", real, &C::layer_norm_eps);
    add("local_rank", integer, &C::local_rank);
    add("seed", integer, &C::seed);
    add("fp16", flag, &C::fp16);
    add("bf16", flag, &C::bf16);
    add("pre_layer_norm", flag, &C::pre_layer_norm);
    add("normalize_invertible", flag, &C::normalize_invertible);
    add("gelu_checkpoint", flag, &C::gelu_checkpoint);
    add("adjust_init_range", flag, &C::adjust_init_range);
    add("attn_dropout_checkpoint", flag, &C::attn_dropout_checkpoint);
    add("stochastic_mode", flag, &C::stochastic_mode);
    add("huggingface", flag, &C::huggingface);
    add("return_tuple", flag, &C::return_tuple);
    add("training", flag, &C::training);
    add("layer_id", integer, &C::layer_id);
    return t;
  }();
  return table;
}

void check_ratio(double value, const char* key) {
  TS_CHECK(std::isfinite(value) && value >= 0 && value < 1, kName, key,
           " must be in [0, 1) (-1: 0), got ", value);
}

}  // namespace

const std::vector<std::string>& DeepSpeedTransformerConfig::keys() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& [key, setter] : setters()) n.push_back(key);
    return n;
  }();
  return names;
}

DeepSpeedTransformerConfig DeepSpeedTransformerConfig::from_json(const nlohmann::json& object) {
  TS_CHECK(object.is_object(), "DeepSpeedTransformerConfig: expected a JSON object, got ",
           object.dump());
  DeepSpeedTransformerConfig c;
  for (auto item = object.begin(); item != object.end(); ++item) {
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    const auto& table = setters();
    auto it = std::find_if(table.begin(), table.end(),
                           [&key](const auto& entry) { return entry.first == key; });
    if (it == table.end()) {
      std::string known;
      for (const std::string& k : keys()) known += (known.empty() ? "" : ", ") + k;
      TS_CHECK(false, "DeepSpeedTransformerConfig: unknown key '", key, "' (known: ", known, ")");
    }
    it->second(c, value);
  }
  return c;
}

DType DeepSpeedTransformerConfig::dtype() const {
  return fp16 ? DType::Float16 : bf16 ? DType::BFloat16 : DType::Float32;
}

DeepSpeedTransformerConfig DeepSpeedTransformerConfig::checked() const {
  DeepSpeedTransformerConfig c = *this;
  TS_CHECK(c.hidden_size > 0, kName, "hidden_size must be set (> 0), got ", c.hidden_size);
  TS_CHECK(c.heads > 0, kName, "heads must be set (> 0), got ", c.heads);
  TS_CHECK(c.hidden_size % c.heads == 0, kName, "heads ", c.heads, " does not divide hidden_size ",
           c.hidden_size);
  if (c.intermediate_size <= 0) c.intermediate_size = 4 * c.hidden_size;
  if (c.attn_dropout_ratio == -1) c.attn_dropout_ratio = 0;
  if (c.hidden_dropout_ratio == -1) c.hidden_dropout_ratio = 0;
  if (c.initializer_range == -1) c.initializer_range = 0.02;
  check_ratio(c.attn_dropout_ratio, "attn_dropout_ratio");
  check_ratio(c.hidden_dropout_ratio, "hidden_dropout_ratio");
  TS_CHECK(std::isfinite(c.initializer_range) && c.initializer_range > 0, kName,
           "initializer_range must be > 0, got ", c.initializer_range);
  TS_CHECK(std::isfinite(c.layer_norm_eps) && c.layer_norm_eps > 0, kName,
           "layer_norm_eps must be > 0, got ", c.layer_norm_eps);
  TS_CHECK(!c.adjust_init_range || c.num_hidden_layers > 0, kName,
           "adjust_init_range divides by sqrt(2 x num_hidden_layers): set num_hidden_layers (> "
           "0), got ",
           c.num_hidden_layers);
  TS_CHECK(c.batch_size == -1 || c.batch_size > 0, kName, "batch_size must be > 0 or -1, got ",
           c.batch_size);
  TS_CHECK(c.max_seq_length == -1 || c.max_seq_length > 0, kName,
           "max_seq_length must be > 0 or -1, got ", c.max_seq_length);
  TS_CHECK(c.seed >= -1, kName, "seed must be >= 0 (or -1: the default generator), got ", c.seed);
  TS_CHECK(!(c.fp16 && c.bf16), kName, "fp16 and bf16 are both set: choose one");
  return c;
}

}  // namespace tessera::nn
