#include "added_tokens.h"

#include <algorithm>

namespace tessera::io {

void split_added_tokens(std::string_view text, const AddedTokenList& added,
                        const std::function<void(std::string_view)>& ordinary,
                        std::vector<int64_t>& ids) {
  constexpr size_t npos = std::string_view::npos;
  std::vector<size_t> next(added.size());
  for (size_t i = 0; i < added.size(); ++i) next[i] = text.find(added[i].first);
  size_t at = 0;
  while (true) {
    size_t best = npos, which = 0;
    for (size_t i = 0; i < added.size(); ++i) {
      if (next[i] != npos && next[i] < at) next[i] = text.find(added[i].first, at);
      if (next[i] < best ||
          (next[i] == best && best != npos && added[i].first.size() > added[which].first.size()))
        best = next[i], which = i;
    }
    const size_t end = std::min(best, text.size());
    if (end > at) ordinary(text.substr(at, end - at));
    if (best == npos) break;
    ids.push_back(added[which].second);
    at = best + added[which].first.size();
  }
}

}  // namespace tessera::io
