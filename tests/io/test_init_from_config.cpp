// model.init_from in a training config: the architecture of the HF directory's config.json
// (the fixtures were written by transformers: tests/fixtures/generate_model_fixtures.py),
// restated keys that must agree, and its tokenizer files chosen for the data.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tessera/error.h"
#include "tessera/io/train_config.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const std::string kModels = TESSERA_FIXTURES_DIR "/models/";

io::TrainConfig parse_with(const std::string& model, const std::string& data = "") {
  return io::TrainConfig::parse(R"({"train_batch_size": 2, "model": )" + model +
                                (data.empty() ? "" : R"(, "data": )" + data) + "}");
}

std::string error_of(const std::string& model, const std::string& data = "") {
  try {
    parse_with(model, data);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// A scratch model directory holding `config` as config.json (and the named extra files).
struct ScratchModel {
  fs::path dir = fs::temp_directory_path() / ("tessera-init-from-" + std::to_string(::getpid()));
  explicit ScratchModel(const std::string& config) {
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << config;
  }
  ~ScratchModel() { fs::remove_all(dir); }
  std::string model() const { return R"({"init_from": ")" + dir.string() + R"("})"; }
};

}  // namespace

TEST_CASE("model.init_from: GPT-2's config.json is the architecture") {
  const std::string gpt = R"({"init_from": ")" + kModels + R"(gpt2-tiny"})";
  const io::TrainConfig c = parse_with(gpt);
  CHECK(c.model.type == "gpt2");
  CHECK(c.model.n_layer == 2);
  CHECK(c.model.n_head == 4);
  CHECK(c.model.n_embd == 32);
  CHECK(c.model.block_size == 32);  // n_positions
  CHECK(c.model.dropout == 0.0);    // resid_pdrop
  CHECK(c.model.bias);
  CHECK(c.data.tokenizer == "char");  // the directory has no tokenizer files
  // Restating what it says, and a shorter window, are fine.
  const io::TrainConfig same = parse_with(R"({"init_from": ")" + kModels +
                                          R"(gpt2-tiny", "type": "gpt2", "n_layer": 2,
                                          "n_head": 4, "block_size": 16, "dropout": 0.2})");
  CHECK(same.model.block_size == 16);
  CHECK(same.model.dropout == 0.2);
  const std::string dir = kModels + "gpt2-tiny";
  CHECK(error_of(R"({"init_from": ")" + dir + R"(", "n_head": 2})")
            .find("'model.n_head' is 2 but model.init_from's " + dir +
                  "/config.json has n_head 4") != std::string::npos);
  CHECK(error_of(R"({"init_from": ")" + dir + R"(", "type": "bert"})")
            .find("'model.type' is \"bert\" but") != std::string::npos);
  CHECK(
      error_of(R"({"init_from": ")" + dir + R"(", "bias": false})").find("'model.bias' is false") !=
      std::string::npos);
  CHECK(error_of(R"({"init_from": ")" + dir + R"(", "block_size": 33})")
            .find("'model.block_size' (33) is longer than model.init_from's n_positions (32") !=
        std::string::npos);
  CHECK(error_of(R"({"init_from": ")" + dir + R"(", "size": "gpt2"})")
            .find("'model.size' and 'model.init_from' both name an architecture") !=
        std::string::npos);
}

TEST_CASE("model.init_from: BERT's config.json, and its next-sentence head decides data.nsp") {
  const std::string dir = kModels + "bert-tiny";
  const io::TrainConfig c = parse_with(R"({"init_from": ")" + dir + R"("})");
  CHECK(c.model.type == "bert");
  CHECK(c.model.n_layer == 2);
  CHECK(c.model.n_head == 4);
  CHECK(c.model.n_embd == 32);
  CHECK(c.model.intermediate_size == 64);
  CHECK(c.model.block_size == 32);
  CHECK(c.data.nsp);  // BertForPreTraining
  CHECK(error_of(R"({"init_from": ")" + dir + R"("})", R"({"nsp": false})")
            .find("'data.nsp' is false but model.init_from's") != std::string::npos);
  CHECK(error_of(R"({"init_from": ")" + dir + R"(", "intermediate_size": 128})")
            .find("'model.intermediate_size' is 128") != std::string::npos);
}

TEST_CASE("model.init_from: a directory or config.json that cannot be used is named") {
  CHECK(error_of(R"({"init_from": "/no/such/dir"})").find("\"/no/such/dir\" is not a directory") !=
        std::string::npos);
  {
    ScratchModel m(R"({"model_type": "llama", "n_layer": 2})");
    CHECK(error_of(m.model()).find("model_type \"llama\" is not supported") != std::string::npos);
  }
  {
    ScratchModel m(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 4})");
    CHECK(error_of(m.model()).find("config.json' has no 'n_embd'") != std::string::npos);
  }
  {
    ScratchModel m(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": "big"})");
    CHECK(error_of(m.model()).find("'n_embd' must be a positive integer, found \"big\"") !=
          std::string::npos);
  }
  {
    ScratchModel m(R"({"model_type": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 8,
                       "n_positions": 16, "bias": "yes"})");
    CHECK(error_of(m.model()).find("'bias' must be true or false") != std::string::npos);
  }
  {
    ScratchModel m("{not json");
    CHECK(error_of(m.model()).find("invalid JSON") != std::string::npos);
  }
}

TEST_CASE("model.init_from: the directory's tokenizer unless data.tokenizer is stated") {
  ScratchModel m(R"({"model_type": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8,
                     "n_positions": 16, "vocab_size": 400})");
  fs::copy_file(TESSERA_FIXTURES_DIR "/tokenizers/gpt2-bpe/tokenizer.json",
                m.dir / "tokenizer.json");
  const io::TrainConfig c = parse_with(m.model());
  CHECK(c.data.tokenizer == "gpt2");
  CHECK(c.data.tokenizer_file == (m.dir / "tokenizer.json").string());
  CHECK(parse_with(m.model(), R"({"tokenizer": "char"})").data.tokenizer == "char");
  // Stated gpt2 without files takes the directory's.
  CHECK(parse_with(m.model(), R"({"tokenizer": "gpt2"})").data.tokenizer_file ==
        (m.dir / "tokenizer.json").string());
  fs::remove(m.dir / "tokenizer.json");
  CHECK(error_of(m.model(), R"({"tokenizer": "gpt2"})")
            .find("has neither vocab.json + merges.txt nor tokenizer.json") != std::string::npos);
}

TEST_CASE("model.init_from: sizes past what can be built are refused, naming the key") {
  ScratchModel m(R"({"model_type": "gpt2", "n_layer": 1000000000000, "n_head": 4, "n_embd": 8,
                     "n_positions": 16})");
  CHECK(error_of(m.model()).find("'n_layer' is 1000000000000, more than the 1048576") !=
        std::string::npos);
}
