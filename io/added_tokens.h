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

// Calls `ordinary` for each stretch of `text` between added tokens (in order) and appends each
// added token's id to `ids` where it occurs: the earliest match first, the longest at a tie.
// Linear: each added token's next occurrence is searched for again only once passed.
void split_added_tokens(std::string_view text, const AddedTokenList& added,
                        const std::function<void(std::string_view)>& ordinary,
                        std::vector<int64_t>& ids);

}  // namespace tessera::io
