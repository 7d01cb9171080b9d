// Tokenizers on small vocabularies written by hand (expected ids worked out in comments), and on
// files written by Hugging Face's tokenizers library (its ids as the reference).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "io/utf8.h"
#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/tokenizer.h"

using namespace tessera;
using io::utf8_encode;

TEST_CASE("char tokenizer: sorted characters, round trip, unknown character named") {
  const auto tok = io::CharTokenizer::from_corpus("hello");
  CHECK(tok.chars() == std::vector<std::string>{"e", "h", "l", "o"});
  CHECK(tok.encode("hole") == std::vector<int64_t>{1, 3, 2, 0});
  CHECK(tok.decode({1, 0, 2, 2, 3}) == "hello");
  CHECK_THROWS_WITH_AS(tok.encode("hez"), doctest::Contains("'z' at byte offset 2"), Error);
  const auto u = io::CharTokenizer::from_corpus("aé");  // multi-byte characters are one token
  CHECK(u.vocab_size() == 2);
  CHECK(u.decode(u.encode("éa")) == "éa");
}

TEST_CASE("GPT-2 pre-tokenisation follows the GPT-2 pattern") {
  const io::GPT2Tokenizer tok({{"a", 0}}, {});
  CHECK(tok.pretokenize("I'm  here!! 42x") ==
        std::vector<std::string>{"I", "'m", " ", " here", "!!", " 42", "x"});
  CHECK(tok.pretokenize("héllo wörld") == std::vector<std::string>{"héllo", " wörld"});
  CHECK(tok.pretokenize("a \n") == std::vector<std::string>{"a", " \n"});
}

TEST_CASE("GPT-2 pre-tokenisation: the ASCII fast path gives PCRE2's pieces") {
  const io::GPT2Tokenizer tok({{"a", 0}}, {});
  // Every ASCII class next to the bytes the fast path leaves to PCRE2: control bytes, Unicode
  // letters, digits, spaces and punctuation, a combining mark, CJK, an emoji.
  const std::vector<std::string> atoms{"a",
                                       "Z",
                                       "q",
                                       "7",
                                       "0",
                                       " ",
                                       "  ",
                                       "\t",
                                       "\n",
                                       "\r",
                                       "\v",
                                       "\f",
                                       "'",
                                       "s",
                                       "t",
                                       "re",
                                       "ve",
                                       "m",
                                       "ll",
                                       "d",
                                       "'s",
                                       "'ll",
                                       "!",
                                       ".",
                                       "~",
                                       "\x01",
                                       "\x1c",
                                       "\x7f",
                                       "\xc3\xa9" /* é */,
                                       "\xc2\xa0" /* NBSP */,
                                       "\xe3\x80\x80" /* ideographic space */,
                                       "\xd9\xa3" /* Arabic-Indic 3 */,
                                       "\xc2\xbf" /* ¿ */,
                                       "\xcc\x81" /* combining acute */,
                                       "\xe6\xbc\xa2" /* 漢 */,
                                       "\xf0\x9f\x98\x80" /* emoji */,
                                       "\xc2\x85" /* NEL */};
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (int trial = 0; trial < 20000; ++trial) {
    std::string text;
    const size_t len = 1 + next() % 12;
    for (size_t i = 0; i < len; ++i) text += atoms[next() % atoms.size()];
    CAPTURE(text);
    REQUIRE(tok.pretokenize(text) == tok.pretokenize(text, true));
  }
  const std::string long_text = "The  quick\tbrown fox's 42 jumps!!  \n\n  over... 'tis\r\n";
  CHECK(tok.pretokenize(long_text) == tok.pretokenize(long_text, true));
}

TEST_CASE("GPT-2 BPE applies merges by rank") {
  // " " is byte 0x20, shown as U+0120 (Ġ) in GPT-2's byte-to-character map.
  const std::string G = utf8_encode(0x120);
  std::unordered_map<std::string, int64_t> vocab;
  int64_t id = 0;
  for (const std::string& s : std::vector<std::string>{"h", "e", "l", "o", "w", "r", "d", G})
    vocab[s] = id++;
  vocab["hello"] = 100;
  vocab[G + "world"] = 101;
  vocab["he"] = 102;
  vocab["ll"] = 103;
  vocab["hell"] = 104;
  vocab[G + "w"] = 105;
  vocab["or"] = 106;
  vocab[G + "wor"] = 107;
  vocab[G + "worl"] = 108;
  const std::vector<std::pair<std::string, std::string>> merges{
      {"h", "e"}, {"l", "l"},      {"he", "ll"},     {"hell", "o"},    {G, "w"},
      {"o", "r"}, {G + "w", "or"}, {G + "wor", "l"}, {G + "worl", "d"}};
  const io::GPT2Tokenizer tok(vocab, merges);
  CHECK(tok.encode("hello world") == std::vector<int64_t>{100, 101});
  // Without the later merges "hell" stays split: h e l l -> he l l -> he ll -> hell.
  CHECK(tok.encode("hell") == std::vector<int64_t>{104});
  CHECK(tok.encode("lo") == std::vector<int64_t>{2, 3});
  CHECK(tok.decode({100, 101}) == "hello world");
}

TEST_CASE("GPT-2 byte-level round trip of any UTF-8 and control bytes") {
  // A vocabulary of the 256 byte symbols alone: every text encodes, one id per byte.
  // Built from GPT-2's published mapping rule: printable Latin-1 bytes map to themselves,
  // the others to U+0100 onwards in byte order.
  std::unordered_map<std::string, int64_t> vocab;
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    vocab[utf8_encode(printable ? b : 256 + next++)] = b;
  }
  const io::GPT2Tokenizer tok(vocab, {});
  const std::string text = "tab\there\nnull?\x01 caf\xc3\xa9 \xe6\xbc\xa2";
  const auto ids = tok.encode(text);
  CHECK(ids.size() == text.size());
  for (size_t i = 0; i < text.size(); ++i) CHECK(ids[i] == static_cast<unsigned char>(text[i]));
  CHECK(tok.decode(ids) == text);
}

TEST_CASE("WordPiece: basic tokenisation then longest-match-first pieces") {
  const io::WordPieceTokenizer tok({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world",
                                    "un", "##aff", "##able", ",", "!", "cafe", "\xe6\xbc\xa2",
                                    "\xe5\xad\x97", "##s"});
  CHECK(tok.basic_tokenize("Hello, unaffable World! Caf\xc3\xa9 \xe6\xbc\xa2\xe5\xad\x97 xyz") ==
        std::vector<std::string>{"hello", ",", "unaffable", "world", "!", "cafe", "\xe6\xbc\xa2",
                                 "\xe5\xad\x97", "xyz"});
  // hello , un ##aff ##able world ! cafe 漢 字 [UNK]
  CHECK(tok.encode("Hello, unaffable World! Caf\xc3\xa9 \xe6\xbc\xa2\xe5\xad\x97 xyz") ==
        std::vector<int64_t>{5, 10, 7, 8, 9, 6, 11, 12, 13, 14, 1});
  CHECK(tok.encode("worlds") == std::vector<int64_t>{6, 15});
  CHECK(tok.decode({7, 8, 9, 6}) == "unaffable world");
  CHECK(tok.token_id("[MASK]") == 4);
  CHECK_THROWS_AS(io::WordPieceTokenizer({"a"}), Error);  // no [UNK]
}

// Files written by Hugging Face's `tokenizers` library, and its encodings of sample strings
// (tests/fixtures/generate_tokenizer_fixtures.py).
namespace {
const std::string kTokDir = TESSERA_FIXTURES_DIR "/tokenizers/";
nlohmann::json tokenizer_expectations() {
  return nlohmann::json::parse(io::read_text_file(kTokDir + "expected.json"));
}
}  // namespace

TEST_CASE("GPT-2 vocab.json + merges.txt written by HF tokenizers: same ids, round trip") {
  const auto want = tokenizer_expectations()["gpt2-bpe"];
  const auto tok = io::GPT2Tokenizer::from_files(kTokDir + "gpt2-bpe/vocab.json",
                                                 kTokDir + "gpt2-bpe/merges.txt");
  CHECK(tok.vocab_size() == want["vocab_size"].get<int64_t>());
  for (const auto& e : want["encodings"]) {
    const std::string text = e["text"];
    INFO("text: ", text);
    CHECK(tok.encode(text) == e["ids"].get<std::vector<int64_t>>());
    CHECK(tok.decode(tok.encode(text)) == text);
  }
}

TEST_CASE("BERT vocab.txt written by HF tokenizers: same ids") {
  const auto want = tokenizer_expectations()["bert-wordpiece"];
  const auto tok = io::WordPieceTokenizer::from_file(kTokDir + "bert-wordpiece/vocab.txt");
  CHECK(tok.vocab_size() == want["vocab_size"].get<int64_t>());
  for (const auto& e : want["encodings"]) {
    const std::string text = e["text"];
    INFO("text: ", text);
    CHECK(tok.encode(text) == e["ids"].get<std::vector<int64_t>>());
  }
}

TEST_CASE("tokenizer files with wrong contents are errors naming the file") {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("tessera-tok-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string merges = write("merges.txt", "#version: 0.2\na b\n");
  auto err = [&](const std::string& vocab_text) {
    try {
      io::GPT2Tokenizer::from_files(write("vocab.json", vocab_text), merges);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(err("[1, 2]").find("expected a JSON object") != std::string::npos);
  CHECK(err(R"({"a": "one"})").find("the id of 'a' must be an integer") != std::string::npos);
  // Past int64: an error about the value, not a wrapped "negative id".
  CHECK(err(R"({"a": 18446744073709551615})").find("the id of 'a' must be an integer") !=
        std::string::npos);
  CHECK(err(R"({"a": 0, "b": 1000000000000})").find("far beyond the vocabulary") !=
        std::string::npos);
  CHECK(err("{").find("invalid JSON") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("GPT-2 tokenizer.json written by HF tokenizers: the same ids as its vocab + merges") {
  const auto want = tokenizer_expectations()["gpt2-bpe"];
  const auto tok = io::GPT2Tokenizer::from_tokenizer_json(kTokDir + "gpt2-bpe/tokenizer.json");
  CHECK(tok.vocab_size() == want["vocab_size"].get<int64_t>());
  for (const auto& e : want["encodings"]) {
    const std::string text = e["text"];
    INFO("text: ", text);
    CHECK(tok.encode(text) == e["ids"].get<std::vector<int64_t>>());
  }
}

TEST_CASE("a tokenizer.json of another pipeline is refused, naming the file and what differs") {
  const std::string dir =
      std::filesystem::temp_directory_path() / ("tessera-tokjson-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const nlohmann::json good =
      nlohmann::json::parse(io::read_text_file(kTokDir + "gpt2-bpe/tokenizer.json"));
  auto err = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json j = good;
    change(j);
    const std::string path = dir + "/tokenizer.json";
    std::ofstream(path) << j.dump();
    try {
      io::GPT2Tokenizer::from_tokenizer_json(path);
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find(path) != std::string::npos);
      return what;
    }
    return std::string("no error");
  };
  CHECK(err([](auto& j) {
          j["model"]["type"] = "WordPiece";
        }).find("model.type is \"WordPiece\"") != std::string::npos);
  CHECK(err([](auto& j) {
          j["normalizer"] = {{"type", "NFC"}};
        }).find("a normalizer") != std::string::npos);
  CHECK(err([](auto& j) {
          j["pre_tokenizer"] = {{"type", "Metaspace"}};
        }).find("expected GPT-2's {\"type\": \"ByteLevel\"}") != std::string::npos);
  CHECK(err([](auto& j) {
          j["pre_tokenizer"]["add_prefix_space"] = true;
        }).find("add_prefix_space") != std::string::npos);
  CHECK(err([](auto& j) {
          j["model"]["merges"][0] = "nospace";
        }).find("model.merges[0] is \"nospace\"") != std::string::npos);
  CHECK(err([](auto& j) {
          j["model"]["vocab"] = nlohmann::json::array();
        }).find("model.vocab must be an object") != std::string::npos);
  // An added token under an id another token has: two tokens would decode from one id.
  CHECK(err([](auto& j) {
          j["added_tokens"] = {{{"id", 0}, {"content", "<|endoftext|>"}}};
        }).find("is given to both") != std::string::npos);
  CHECK(err([](auto& j) {
          j["added_tokens"] = {{{"content", "x"}}};
        }).find("an added_tokens entry needs \"id\" and \"content\"") != std::string::npos);
  std::filesystem::remove_all(dir);
}
