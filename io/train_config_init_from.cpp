// model.init_from: a Hugging Face model directory decides the architecture (its config.json)
// and, unless data.tokenizer is stated, the tokenizer (its own files). The training config may
// restate the architecture (equal values) and changes only what training may change.
#include <filesystem>
#include <span>

#include "config_sections.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"

namespace tessera::io::config {

namespace {

namespace fs = std::filesystem;

// One model key, the field it fills and the HF config.json key that holds it.
struct ArchitectureKey {
  const char* ours;
  int64_t TrainConfig::Model::*field;
  const char* hf;
};
constexpr ArchitectureKey kGpt2Keys[] = {{"n_layer", &TrainConfig::Model::n_layer, "n_layer"},
                                         {"n_head", &TrainConfig::Model::n_head, "n_head"},
                                         {"n_embd", &TrainConfig::Model::n_embd, "n_embd"}};
constexpr ArchitectureKey kBertKeys[] = {
    {"n_layer", &TrainConfig::Model::n_layer, "num_hidden_layers"},
    {"n_head", &TrainConfig::Model::n_head, "num_attention_heads"},
    {"n_embd", &TrainConfig::Model::n_embd, "hidden_size"},
    {"intermediate_size", &TrainConfig::Model::intermediate_size, "intermediate_size"}};

json read_hf_config(const std::string& dir, const std::string& source) {
  TS_CHECK(fs::is_directory(dir), source, ": 'model.init_from' \"", dir,
           "\" is not a directory (a Hugging Face model directory: config.json and weights)");
  const std::string path = (fs::path(dir) / "config.json").string();
  TS_CHECK(fs::exists(path), source, ": 'model.init_from' \"", dir, "\" has no config.json");
  json j;
  try {
    j = json::parse(read_text_file(path));
  } catch (const json::exception& e) {
    fail("'", path, "': invalid JSON: ", e.what());
  }
  TS_CHECK(j.is_object(), "'", path, "': expected a JSON object");
  return j;
}

// Sizes of a model that can be built (a hostile file's 10^12 layers would only exhaust memory).
int64_t hf_integer(const json& j, const char* key, const std::string& path) {
  constexpr int64_t kMax = int64_t{1} << 20;
  TS_CHECK(j.contains(key), "'", path, "' has no '", key, "'");
  const json& v = j[key];
  TS_CHECK(JsonFields::is_int64(v) && v.get<int64_t>() >= 1, "'", path, "': '", key,
           "' must be a positive integer, found ", v.dump());
  TS_CHECK(v.get<int64_t>() <= kMax, "'", path, "': '", key, "' is ", v.dump(), ", more than the ",
           kMax, " Tessera builds");
  return v.get<int64_t>();
}

bool hf_bool(const json& j, const char* key, bool fallback, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  TS_CHECK(j[key].is_boolean(), "'", path, "': '", key, "' must be true or false, found ",
           j[key].dump());
  return j[key].get<bool>();
}

double hf_probability(const json& j, const char* key, double fallback, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  TS_CHECK(j[key].is_number() && j[key].get<double>() >= 0 && j[key].get<double>() < 1, "'", path,
           "': '", key, "' must be a number in [0, 1), found ", j[key].dump());
  return j[key].get<double>();
}

}  // namespace

void adopt_init_from_model(Section& m, TrainConfig& c) {
  auto& md = c.model;
  const std::string& source = m.source();
  const json j = read_hf_config(md.init_from, source);
  const std::string path = (fs::path(md.init_from) / "config.json").string();
  const std::string type = j.contains("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>()
                               : j.value("model_type", json()).dump();
  TS_CHECK(type == "gpt2" || type == "bert", "'", path, "': model_type \"", type,
           "\" is not supported (gpt2 or bert)");
  auto conflict = [&](const std::string& key, const std::string& ours, const std::string& hf,
                      const std::string& theirs) {
    fail(source, ": 'model.", key, "' is ", ours, " but model.init_from's ", path, " has ", hf, " ",
         theirs, ": leave 'model.", key, "' out (the architecture comes from config.json)");
  };
  if (m.has("type") && md.type != type) conflict("type", '"' + md.type + '"', "model_type", type);
  md.type = type;
  if (m.has("size"))
    fail(source,
         ": 'model.size' and 'model.init_from' both name an architecture: leave "
         "'model.size' out (the architecture comes from ",
         path, ")");
  const bool gpt2 = type == "gpt2";
  for (const ArchitectureKey& k : gpt2 ? std::span<const ArchitectureKey>(kGpt2Keys)
                                       : std::span<const ArchitectureKey>(kBertKeys)) {
    const int64_t theirs = hf_integer(j, k.hf, path);
    int64_t& ours = md.*k.field;
    if (m.has(k.ours) && ours != theirs)
      conflict(k.ours, std::to_string(ours), k.hf, std::to_string(theirs));
    ours = theirs;
  }
  if (gpt2) {
    const bool bias = hf_bool(j, "bias", true, path);
    if (m.has("bias") && md.bias != bias)
      conflict("bias", md.bias ? "true" : "false", "bias", bias ? "true" : "false");
    md.bias = bias;
  }
  // Training may use windows shorter than the model's positions, never longer.
  const char* positions_key = gpt2 ? "n_positions" : "max_position_embeddings";
  const int64_t positions = hf_integer(j, positions_key, path);
  if (!m.has("block_size")) md.block_size = positions;
  TS_CHECK(md.block_size <= positions, source, ": 'model.block_size' (", md.block_size,
           ") is longer than model.init_from's ", positions_key, " (", positions, ", ", path, ")");
  if (!m.has("dropout"))
    md.dropout = hf_probability(j, gpt2 ? "resid_pdrop" : "hidden_dropout_prob", 0.1, path);
  // BERT's next-sentence head comes with BertForPreTraining (data.nsp, read later, may only
  // agree: adopt_init_from_data).
  c.data.nsp = false;
  if (!gpt2 && j.contains("architectures") && j["architectures"].is_array())
    for (const json& a : j["architectures"]) c.data.nsp = c.data.nsp || a == "BertForPreTraining";
}

void adopt_init_from_data(const json& data, bool nsp_from_init, TrainConfig& c) {
  auto& dt = c.data;
  if (c.model.init_from.empty()) return;
  const bool tokenizer_stated = data.is_object() && data.contains("tokenizer");
  TS_CHECK(c.model.type != "bert" || dt.nsp == nsp_from_init, c.source, ": 'data.nsp' is ",
           dt.nsp ? "true" : "false", " but model.init_from's ", c.model.init_from,
           "/config.json is ", nsp_from_init ? "" : "not ",
           "a BertForPreTraining (with the next-sentence head): leave 'data.nsp' out");
  const bool files_given = !dt.vocab.empty() || !dt.merges.empty() || !dt.tokenizer_file.empty();
  if (files_given || (tokenizer_stated && dt.tokenizer == "char")) return;
  const fs::path dir = c.model.init_from;
  if (c.model.type == "bert" || dt.tokenizer == "wordpiece") {
    // BERT's vocab.txt (its tokenizer.json is WordPiece, read from vocab.txt instead), cased
    // or not as its tokenizer_config.json says.
    if (fs::exists(dir / "vocab.txt")) {
      dt.tokenizer = "wordpiece";
      dt.vocab = (dir / "vocab.txt").string();
      const fs::path tc = dir / "tokenizer_config.json";
      const bool lower_stated = data.is_object() && data.contains("lower_case");
      if (!lower_stated && fs::exists(tc)) {
        json t;
        try {
          t = json::parse(read_text_file(tc.string()));
        } catch (const json::exception& e) {
          fail("'", tc.string(), "': invalid JSON: ", e.what());
        }
        if (t.is_object()) dt.lower_case = hf_bool(t, "do_lower_case", true, tc.string());
      }
    }
    TS_CHECK(dt.tokenizer != "wordpiece" || !dt.vocab.empty(), c.source,
             ": 'data.tokenizer' \"wordpiece\" needs 'data.vocab', and model.init_from's "
             "directory \"",
             c.model.init_from, "\" has no vocab.txt");
    return;
  }
  // tokenizer.json first: it holds the added tokens too (added_tokens.json beside vocab.json
  // is not read).
  if (fs::exists(dir / "tokenizer.json")) {
    dt.tokenizer = "gpt2";
    dt.tokenizer_file = (dir / "tokenizer.json").string();
  } else if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
    dt.tokenizer = "gpt2";
    dt.vocab = (dir / "vocab.json").string();
    dt.merges = (dir / "merges.txt").string();
  }
  // Otherwise the corpus's character tokenizer; the model's vocab_size must then equal its
  // (checked where the model is built, naming both sizes).
  TS_CHECK(dt.tokenizer != "gpt2" || !dt.vocab.empty() || !dt.tokenizer_file.empty(), c.source,
           ": 'data.tokenizer' \"gpt2\" needs 'data.vocab' and 'data.merges' or "
           "'data.tokenizer_file', and model.init_from's directory \"",
           c.model.init_from, "\" has neither vocab.json + merges.txt nor tokenizer.json");
}

}  // namespace tessera::io::config
