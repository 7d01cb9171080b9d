#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <climits>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "added_tokens.h"
#include "gpt2_ascii_pieces.h"
#include "gpt2_merges.h"
#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/tokenizer.h"
#include "tessera/io/utf8_validation.h"
#include "utf8.h"

namespace tessera::io {

namespace {

// GPT-2's pre-tokenisation pattern (contractions, letters, numbers, other, whitespace).
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Each byte maps to a printable character: printable Latin-1 bytes to themselves, the rest to
// code points from 256 up, in byte order (so BPE never sees whitespace or control bytes).
struct ByteMap {
  std::array<std::string, 256> to_text;
  std::unordered_map<std::string, uint8_t> to_byte;
  ByteMap() {
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t cp =
          printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + next++);
      to_text[b] = utf8_encode(cp);
      to_byte[to_text[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

struct GPT2Tokenizer::Regex {
  pcre2_code* code = nullptr;
  Regex() {
    int err = 0;
    PCRE2_SIZE at = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
    TS_CHECK(code != nullptr,
             "GPT2Tokenizer: cannot compile the pre-tokenisation pattern (PCRE2 error ", err, ")");
  }
  ~Regex() { pcre2_code_free(code); }
};

GPT2Tokenizer::GPT2Tokenizer(std::unordered_map<std::string, int64_t> vocab,
                             std::vector<std::pair<std::string, std::string>> merges,
                             std::vector<std::string> added_tokens)
    : vocab_(std::move(vocab)), regex_(std::make_unique<Regex>()) {
  int64_t max_id = -1;
  for (auto& [tok, id] : vocab_) {
    TS_CHECK(id >= 0, "GPT2Tokenizer: negative id ", id, " for token '", tok, "'");
    max_id = std::max(max_id, id);
  }
  // Ids index a table: they must be (nearly) dense, not arbitrary large numbers.
  TS_CHECK(max_id < 2 * static_cast<int64_t>(vocab_.size()) + 1024, "GPT2Tokenizer: id ", max_id,
           " is far beyond the vocabulary's ", vocab_.size(), " tokens");
  id_to_token_.resize(static_cast<size_t>(max_id + 1));
  std::vector<bool> taken(id_to_token_.size());
  for (auto& [tok, id] : vocab_) {
    TS_CHECK(!taken[id], "GPT2Tokenizer: id ", id, " is given to both '", id_to_token_[id],
             "' and '", tok, "'");
    taken[id] = true;
    id_to_token_[id] = tok;
  }
  is_added_.resize(id_to_token_.size());
  for (std::string& t : added_tokens) {
    auto it = vocab_.find(t);
    TS_CHECK(it != vocab_.end() && !t.empty(), "GPT2Tokenizer: added token '", t,
             "' is not in the vocabulary");
    if (is_added_[it->second]) continue;
    is_added_[it->second] = true;
    added_.emplace_back(std::move(t), it->second);
  }
  merges_ = std::make_unique<Merges>(vocab_, merges, byte_map().to_text);
}

GPT2Tokenizer::~GPT2Tokenizer() = default;
GPT2Tokenizer::GPT2Tokenizer(GPT2Tokenizer&&) noexcept = default;

GPT2Tokenizer GPT2Tokenizer::from_files(const std::string& vocab_json,
                                        const std::string& merges_txt) {
  std::unordered_map<std::string, int64_t> vocab;
  nlohmann::json j;  // kept alive while its items are read (a temporary's would dangle)
  try {
    j = nlohmann::json::parse(read_text_file(vocab_json));
  } catch (const nlohmann::json::exception& e) {
    fail("'", vocab_json, "': invalid JSON: ", e.what());
  }
  TS_CHECK(j.is_object(), "'", vocab_json, "': expected a JSON object of token -> id");
  for (auto& [k, v] : j.items()) {
    TS_CHECK(JsonFields::is_int64(v), "'", vocab_json, "': the id of '", k,
             "' must be an integer, found ", v.dump());
    vocab[k] = v.get<int64_t>();
  }
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> added;
  if (vocab.count("<|endoftext|>")) added.push_back("<|endoftext|>");
  std::ifstream in(merges_txt);
  TS_CHECK(in.good(), "cannot open '", merges_txt, "'");
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t sp = line.find(' ');
    TS_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < line.size(), "'", merges_txt, "' line ",
             line_no, ": expected two symbols separated by a space, got '", line, "'");
    merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  try {
    return GPT2Tokenizer(std::move(vocab), std::move(merges), std::move(added));
  } catch (const Error& e) {
    fail("'", vocab_json, "' with '", merges_txt, "': ", e.what());
  }
}

namespace {

// Calls piece(begin, end) for each match of GPT-2's pattern in `text` (checked to be UTF-8 by
// the caller). A template, so the per-piece work inlines into the matching loop. ASCII pieces
// are found without PCRE2 unless `ascii_fast_path` is false (the tests' reference).
template <typename Piece>
void match_pieces(const pcre2_code* code, std::string_view text, Piece&& piece,
                  bool ascii_fast_path = true) {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), &pcre2_match_data_free);
  TS_CHECK(md, "GPT2Tokenizer: out of memory for PCRE2's match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
  PCRE2_SIZE at = 0;
  while (at < text.size()) {
    if (ascii_fast_path) {
      if (const size_t end = gpt2_ascii::piece_end(text, at)) {
        piece(at, end);
        at = end;
        continue;
      }
    }
    // Checked above: PCRE2 would otherwise validate the whole text again at every match.
    const int rc =
        pcre2_match(code, subject, text.size(), at, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    TS_CHECK(rc >= 0, "GPT2Tokenizer: PCRE2 match error ", rc, " at byte offset ", at);
    if (ov[1] == ov[0]) break;
    piece(ov[0], ov[1]);
    at = ov[1];
  }
}

void check_utf8(std::string_view text) {
  if (const auto bad = first_invalid_utf8(text))
    fail("GPT2Tokenizer: the text is not UTF-8 (an invalid byte sequence at offset ", *bad, ")");
}
}  // namespace

std::vector<std::string> GPT2Tokenizer::pretokenize(const std::string& text,
                                                    bool pcre2_only) const {
  check_utf8(text);
  std::vector<std::string> out;
  match_pieces(
      regex_->code, text, [&](size_t b, size_t e) { out.push_back(text.substr(b, e - b)); },
      !pcre2_only);
  return out;
}

// Words repeat: each distinct piece is merged once per encoder. Open addressing over a flat
// array holding each piece's hash, its text and its ids as offsets into two arenas (a
// node-based map's pointer chases were a sixth of encoding time). Long pieces are kept too (a
// 10 MB corpus of documentation and code held 3,654 pieces over 255 bytes, 13% of its bytes,
// mostly rules of '=' and runs of spaces). Bounded, so that a corpus of only distinct pieces
// cannot grow it without end: 2^19 pieces and 64 MB of their text.
struct GPT2Tokenizer::WordCache {
  static constexpr size_t kMaxEntries = size_t{1} << 19;
  static constexpr size_t kMaxPiece = 65535;  // longer pieces are merged anew each time
  static constexpr size_t kMaxTexts = size_t{64} << 20;
  struct Slot {
    uint64_t hash = 0;  // 0: empty (hashes are made odd)
    uint32_t text = 0, ids = 0;
    uint16_t text_size = 0, ids_size = 0;
  };
  std::vector<Slot> slots = std::vector<Slot>(size_t{1} << 12);
  std::string texts;
  std::vector<int32_t> ids;
  size_t entries = 0;

  static uint64_t hash_of(std::string_view word) { return std::hash<std::string_view>{}(word) | 1; }
  const Slot* find(std::string_view word, uint64_t h) const {
    const size_t mask = slots.size() - 1;
    for (size_t i = h & mask; slots[i].hash; i = (i + 1) & mask) {
      const Slot& s = slots[i];
      if (s.hash == h && s.text_size == word.size() &&
          std::memcmp(texts.data() + s.text, word.data(), word.size()) == 0)
        return &s;
    }
    return nullptr;
  }
  void insert(std::string_view word, uint64_t h, const int64_t* first, size_t count) {
    if (word.size() > kMaxPiece || count > kMaxPiece || entries >= kMaxEntries ||
        texts.size() + word.size() > kMaxTexts)
      return;
    if (2 * (entries + 1) > slots.size()) grow();
    Slot s{h, static_cast<uint32_t>(texts.size()), static_cast<uint32_t>(ids.size()),
           static_cast<uint16_t>(word.size()), static_cast<uint16_t>(count)};
    texts.append(word);
    ids.insert(ids.end(), first, first + count);
    place(s);
    ++entries;
  }

 private:
  void place(const Slot& s) {
    const size_t mask = slots.size() - 1;
    size_t i = s.hash & mask;
    while (slots[i].hash) i = (i + 1) & mask;
    slots[i] = s;
  }
  void grow() {
    std::vector<Slot> old(slots.size() * 2);
    old.swap(slots);
    for (const Slot& s : old)
      if (s.hash) place(s);
  }
};

void GPT2Tokenizer::encode_ordinary(std::string_view text, WordCache& cache,
                                    std::vector<int64_t>& ids) const {
  match_pieces(regex_->code, text, [&](size_t b, size_t e) {
    const std::string_view word(text.data() + b, e - b);
    const uint64_t h = WordCache::hash_of(word);
    if (const WordCache::Slot* s = cache.find(word, h)) {
      const int32_t* known = cache.ids.data() + s->ids;
      ids.insert(ids.end(), known, known + s->ids_size);
      return;
    }
    const size_t start = ids.size();
    bpe(word, ids);
    cache.insert(word, h, ids.data() + start, ids.size() - start);
  });
}

std::vector<int64_t> GPT2Tokenizer::encode(const std::string& text) const {
  return encoder()(text);
}

Tokenizer::Encoder GPT2Tokenizer::encoder() const {
  return [this, cache = std::make_shared<WordCache>()](std::string_view text) {
    check_utf8(text);
    std::vector<int64_t> ids;
    split_added_tokens(
        text, added_, [&](std::string_view part) { encode_ordinary(part, *cache, ids); }, ids);
    return ids;
  };
}

std::vector<std::string> GPT2Tokenizer::added_token_texts() const {
  return io::added_token_texts(added_);
}

std::string GPT2Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string bytes, symbols;  // symbols: byte-level text not yet turned back into bytes
  auto flush = [&] {
    for (size_t i = 0; i < symbols.size();) {
      const size_t n = utf8_length(symbols, i);
      auto it = byte_map().to_byte.find(symbols.substr(i, n));
      TS_CHECK(it != byte_map().to_byte.end(),
               "GPT2Tokenizer: token text is not byte-level at offset ", i);
      bytes += static_cast<char>(it->second);
      i += n;
    }
    symbols.clear();
  };
  for (int64_t id : ids) {
    TS_CHECK(id >= 0 && id < vocab_size(), "GPT2Tokenizer: id ", id,
             " is outside the vocabulary of ", vocab_size());
    if (is_added_[id]) {  // its own text, not byte-level symbols
      flush();
      bytes += id_to_token_[id];
    } else {
      symbols += id_to_token_[id];
    }
  }
  flush();
  return bytes;
}

}  // namespace tessera::io
