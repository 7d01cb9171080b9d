// Hugging Face's tokenizer.json: GPT-2's byte-level BPE read from one, and the character
// tokenizer written as one (a WordLevel model over single characters) so that
// AutoTokenizer.from_pretrained loads what `tessera export` writes.
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/tokenizer.h"

namespace tessera::io {

namespace {

using json = nlohmann::json;

bool empty_or_null(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return true;
  return j[key].is_string() && j[key].get<std::string>().empty();
}

// Only GPT-2's own pipeline gives GPT2Tokenizer's ids: no normalizer, ByteLevel
// pre-tokenisation with GPT-2's regex and no added prefix space.
void check_gpt2_pipeline(const json& j, const std::string& path) {
  TS_CHECK(empty_or_null(j, "normalizer"), "'", path, "': a normalizer (",
           j["normalizer"].dump().substr(0, 80),
           ") is not part of GPT-2's byte-level BPE, which is the only tokenizer.json read");
  const json pre = j.value("pre_tokenizer", json());
  TS_CHECK(pre.is_object() && pre.value("type", "") == "ByteLevel", "'", path,
           "': the pre_tokenizer is ", pre.dump().substr(0, 80),
           ", expected GPT-2's {\"type\": \"ByteLevel\"} (only byte-level BPE is read)");
  TS_CHECK(!pre.value("add_prefix_space", false) && pre.value("use_regex", true), "'", path,
           "': ByteLevel with add_prefix_space true or use_regex false gives other ids than "
           "GPT-2's tokenizer");
}

std::vector<std::pair<std::string, std::string>> read_merges(const json& model,
                                                             const std::string& path) {
  const json merges = model.value("merges", json::array());
  TS_CHECK(merges.is_array(), "'", path, "': model.merges must be an array");
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      TS_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < s.size(), "'", path,
               "': model.merges[", i, "] is \"", s, "\", expected two symbols and a space");
      out.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else {  // ["a", "b"] (newer files)
      TS_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), "'", path,
               "': model.merges[", i, "] is ", m.dump().substr(0, 80),
               ", expected \"a b\" or [\"a\", \"b\"]");
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  return out;
}

GPT2Tokenizer read_gpt2_tokenizer_json(const json& j, const std::string& path) {
  TS_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), "'", path,
           "': expected a tokenizer.json object with a \"model\"");
  const json& model = j["model"];
  const std::string type = model.value("type", "BPE");
  TS_CHECK(type == "BPE", "'", path, "': model.type is \"", type,
           "\"; only byte-level BPE (GPT-2's) tokenizer.json files are read");
  TS_CHECK(empty_or_null(model, "continuing_subword_prefix") &&
               empty_or_null(model, "end_of_word_suffix") &&
               (!model.contains("dropout") || model["dropout"].is_null()) &&
               !model.value("ignore_merges", false) && !model.value("byte_fallback", false),
           "'", path,
           "': BPE with a subword prefix, a word suffix, dropout, ignore_merges or byte_fallback "
           "is not GPT-2's tokenizer");
  check_gpt2_pipeline(j, path);
  TS_CHECK(model.contains("vocab") && model["vocab"].is_object(), "'", path,
           "': model.vocab must be an object of token -> id");
  std::unordered_map<std::string, int64_t> vocab;
  for (auto& [token, id] : model["vocab"].items()) {
    TS_CHECK(JsonFields::is_int64(id), "'", path, "': the id of '", token,
             "' must be an integer, found ", id.dump());
    vocab[token] = id.get<int64_t>();
  }
  // Added tokens (GPT-2's <|endoftext|>) normally repeat vocabulary entries; new ones join it.
  std::vector<std::string> added;
  for (const json& t : j.value("added_tokens", json::array())) {
    TS_CHECK(t.is_object() && t.contains("content") && t["content"].is_string() &&
                 JsonFields::is_int64(t.value("id", json())),
             "'", path, "': an added_tokens entry needs \"id\" and \"content\", found ",
             t.dump().substr(0, 80));
    const std::string content = t["content"].get<std::string>();
    const int64_t id = t["id"].get<int64_t>();
    auto it = vocab.find(content);
    TS_CHECK(it == vocab.end() || it->second == id, "'", path, "': added token '", content,
             "' has id ", id, " but the vocabulary gives it ", it->second);
    TS_CHECK(!t.value("lstrip", false) && !t.value("rstrip", false) &&
                 !t.value("single_word", false) && !content.empty(),
             "'", path, "': added token '", content,
             "' with lstrip, rstrip or single_word (or empty) is not supported");
    vocab[content] = id;
    added.push_back(content);
  }
  auto merges = read_merges(model, path);
  try {
    return GPT2Tokenizer(std::move(vocab), std::move(merges), std::move(added));
  } catch (const Error& e) {
    fail("'", path, "': ", e.what());
  }
}

}  // namespace

GPT2Tokenizer GPT2Tokenizer::from_tokenizer_json(const std::string& path) {
  const json j = JsonFields::parse_file(path);
  try {
    return read_gpt2_tokenizer_json(j, path);
  } catch (const json::exception& e) {  // a value of the wrong type
    fail("'", path, "': ", e.what());
  }
}

std::string char_tokenizer_json(const std::vector<std::string>& chars,
                                const std::vector<std::string>& specials) {
  json vocab = json::object();
  int64_t id = 0;
  for (const std::string& c : chars) vocab[c] = id++;
  json added = json::array();
  for (const std::string& s : specials) {
    added.push_back({{"id", id},
                     {"content", s},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
    vocab[s] = id++;
  }
  // Every character a piece of its own ([\s\S]: newlines too), each piece one id, and the
  // pieces joined back without spaces.
  const json tok{{"version", "1.0"},
                 {"truncation", nullptr},
                 {"padding", nullptr},
                 {"added_tokens", added},
                 {"normalizer", nullptr},
                 {"pre_tokenizer",
                  {{"type", "Split"},
                   {"pattern", {{"Regex", "[\\s\\S]"}}},
                   {"behavior", "Isolated"},
                   {"invert", false}}},
                 {"post_processor", nullptr},
                 {"decoder", {{"type", "Fuse"}}},
                 {"model",
                  {{"type", "WordLevel"},
                   {"vocab", vocab},
                   {"unk_token", specials.size() > 1 ? specials[1] : std::string("[UNK]")}}}};
  return tok.dump(1) + "\n";
}

}  // namespace tessera::io
