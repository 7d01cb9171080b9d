// Hugging Face's added tokens (GPT-2's <|endoftext|>, BERT's [CLS] [SEP] [MASK] ...) are split
// out of a text before the tokenizer's own pipeline runs, each its own id. Private to io/.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::io {

using AddedTokenList = std::vector<std::pair<std::string, int64_t>>;  // text, id

// The tokens' texts, in order (Tokenizer::added_token_texts).
inline std::vector<std::string> added_token_texts(const AddedTokenList& added) {
  std::vector<std::string> texts;
  for (const auto& [text, id] : added) texts.push_back(text);
  return texts;
}

// Calls `ordinary` for each stretch of `text` between added tokens (in order) and appends each
// added token's id to `ids` where it occurs: the earliest match first, the longest at a tie.
// Linear: each added token's next occurrence is searched for again only once passed.
void split_added_tokens(std::string_view text, const AddedTokenList& added,
                        const std::function<void(std::string_view)>& ordinary,
                        std::vector<int64_t>& ids);

}  // namespace tessera::io
