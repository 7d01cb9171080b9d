#include <algorithm>
#include <set>

#include "tessera/error.h"
#include "tessera/io/tokenizer.h"
#include "utf8.h"

namespace tessera::io {

CharTokenizer CharTokenizer::from_corpus(const std::string& text) {
  std::set<std::string> chars;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    chars.insert(text.substr(i, n));
    i += n;
  }
  TS_CHECK(!chars.empty(), "CharTokenizer: the corpus is empty");
  return CharTokenizer(std::vector<std::string>(chars.begin(), chars.end()));
}

CharTokenizer::CharTokenizer(std::vector<std::string> chars) : chars_(std::move(chars)) {
  for (size_t i = 0; i < chars_.size(); ++i) ids_[chars_[i]] = static_cast<int64_t>(i);
}

std::vector<int64_t> CharTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_length(text, i);
    auto it = ids_.find(text.substr(i, n));
    TS_CHECK(it != ids_.end(), "CharTokenizer: character '", text.substr(i, n), "' at byte offset ",
             i, " is not in the vocabulary");
    out.push_back(it->second);
    i += n;
  }
  return out;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) {
    TS_CHECK(id >= 0 && id < vocab_size(), "CharTokenizer: id ", id,
             " is outside the vocabulary of ", vocab_size());
    out += chars_[id];
  }
  return out;
}

}  // namespace tessera::io
