#include <utf8proc.h>

#include <fstream>

#include "added_tokens.h"
#include "tessera/error.h"
#include "tessera/io/tokenizer.h"
#include "utf8.h"

namespace tessera::io {

namespace {

std::vector<int32_t> codepoints(const std::string& s) {
  std::vector<int32_t> cps;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t at = 0, n = static_cast<utf8proc_ssize_t>(s.size());
  while (at < n) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(p + at, n - at, &cp);
    if (len <= 0) {  // invalid byte: skipped, as BERT's cleaning drops U+FFFD
      ++at;
      continue;
    }
    cps.push_back(cp);
    at += len;
  }
  return cps;
}

bool is_whitespace(int32_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
         utf8proc_category(c) == UTF8PROC_CATEGORY_ZS;
}
bool is_control(int32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const auto cat = utf8proc_category(c);
  return cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF;
}
bool is_punctuation(int32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126))
    return true;
  const auto cat = utf8proc_category(c);
  return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}
bool is_cjk(int32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// Lower-case, decompose (NFD) and drop combining marks, as BERT's uncased models expect.
std::string lower_strip_accents(const std::string& word) {
  utf8proc_uint8_t* nfd = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(
      reinterpret_cast<const utf8proc_uint8_t*>(word.c_str()), 0, &nfd,
      static_cast<utf8proc_option_t>(UTF8PROC_NULLTERM | UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
  TS_CHECK(n >= 0, "WordPieceTokenizer: cannot normalise '", word, "': ", utf8proc_errmsg(n));
  const std::string decomposed(reinterpret_cast<char*>(nfd), static_cast<size_t>(n));
  std::free(nfd);
  std::string out;
  for (int32_t c : codepoints(decomposed))
    if (utf8proc_category(c) != UTF8PROC_CATEGORY_MN)
      out += utf8_encode(static_cast<uint32_t>(utf8proc_tolower(c)));
  return out;
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& path, bool lower_case) {
  std::ifstream in(path);
  TS_CHECK(in.good(), "cannot open '", path, "'");
  std::vector<std::string> vocab;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    vocab.push_back(line);
  }
  TS_CHECK(!vocab.empty(), "'", path, "' is empty: expected one WordPiece token per line");
  return WordPieceTokenizer(std::move(vocab), lower_case);
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, bool lower_case)
    : vocab_(std::move(vocab)), lower_case_(lower_case) {
  for (size_t i = 0; i < vocab_.size(); ++i) ids_.emplace(vocab_[i], static_cast<int64_t>(i));
  auto it = ids_.find("[UNK]");
  TS_CHECK(it != ids_.end(), "WordPieceTokenizer: the vocabulary has no [UNK] token");
  unk_ = it->second;
  for (const std::string& s : kBertSpecialTokens)
    if (auto found = ids_.find(s); found != ids_.end()) added_.emplace_back(s, found->second);
}

int64_t WordPieceTokenizer::token_id(const std::string& token) const {
  auto it = ids_.find(token);
  TS_CHECK(it != ids_.end(), "WordPieceTokenizer: '", token, "' is not in the vocabulary");
  return it->second;
}

std::vector<std::string> WordPieceTokenizer::basic_tokenize(const std::string& text) const {
  // Clean, space out CJK characters, and split on whitespace.
  std::vector<std::string> words;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) words.push_back(cur);
    cur.clear();
  };
  for (int32_t c : codepoints(text)) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_whitespace(c)) {
      flush();
    } else if (is_cjk(c)) {
      flush();
      words.push_back(utf8_encode(static_cast<uint32_t>(c)));
    } else {
      cur += utf8_encode(static_cast<uint32_t>(c));
    }
  }
  flush();
  // Lower-case, then split punctuation off into tokens of its own.
  std::vector<std::string> out;
  for (const std::string& w : words) {
    const std::string word = lower_case_ ? lower_strip_accents(w) : w;
    std::string piece;
    for (int32_t c : codepoints(word)) {
      if (is_punctuation(c)) {
        if (!piece.empty()) out.push_back(piece);
        out.push_back(utf8_encode(static_cast<uint32_t>(c)));
        piece.clear();
      } else {
        piece += utf8_encode(static_cast<uint32_t>(c));
      }
    }
    if (!piece.empty()) out.push_back(piece);
  }
  return out;
}

std::vector<int64_t> WordPieceTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  split_added_tokens(
      text, added_, [&](std::string_view part) { encode_ordinary(part, ids); }, ids);
  return ids;
}

std::vector<std::string> WordPieceTokenizer::added_token_texts() const {
  return io::added_token_texts(added_);
}

void WordPieceTokenizer::encode_ordinary(std::string_view text, std::vector<int64_t>& ids) const {
  for (const std::string& word : basic_tokenize(std::string(text))) {
    const std::vector<int32_t> cps = codepoints(word);
    if (cps.size() > 100) {
      ids.push_back(unk_);
      continue;
    }
    std::vector<int64_t> pieces;
    size_t start = 0;
    bool bad = false;
    while (start < cps.size()) {
      int64_t found = -1;
      size_t end = cps.size();
      for (; end > start; --end) {  // longest match first
        std::string sub = start > 0 ? "##" : "";
        for (size_t i = start; i < end; ++i) sub += utf8_encode(static_cast<uint32_t>(cps[i]));
        auto it = ids_.find(sub);
        if (it != ids_.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) {
        bad = true;
        break;
      }
      pieces.push_back(found);
      start = end;
    }
    if (bad)
      ids.push_back(unk_);
    else
      ids.insert(ids.end(), pieces.begin(), pieces.end());
  }
}

std::string WordPieceTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    TS_CHECK(id >= 0 && id < vocab_size(), "WordPieceTokenizer: id ", id,
             " is outside the vocabulary of ", vocab_size());
    const std::string& t = vocab_[id];
    if (t.rfind("##", 0) == 0)
      out += t.substr(2);
    else
      out += (out.empty() ? "" : " ") + t;
  }
  return out;
}

}  // namespace tessera::io
