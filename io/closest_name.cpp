// Optimal string alignment distance (Damerau-Levenshtein without repeated edits of one
// substring): a dozen lines, so written here rather than pulled in from a library.
#include "tessera/io/closest_name.h"

#include <algorithm>
#include <cctype>

namespace tessera::io {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                                  std::tolower(static_cast<unsigned char>(b[j - 1]))
                              ? 0
                              : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

}  // namespace

std::optional<std::string> closest_name(const std::string& word,
                                        const std::vector<std::string>& candidates) {
  if (word.size() > 200) return std::nullopt;  // (a key that long is no typo)
  // A third of the word's length, at least one edit and at most three.
  const size_t limit = std::clamp<size_t>(word.size() / 3, 1, 3);
  std::optional<std::string> best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    if (c == word || c.size() > 200) continue;
    const size_t dist = edit_distance(word, c);
    if (dist < best_d) {
      best_d = dist;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const auto c = closest_name(word, candidates);
  return c ? " (did you mean '" + *c + "'?)" : "";
}

}  // namespace tessera::io
