// The known name a misspelt one most likely meant, for "unknown key 'optimiser' (did you mean
// 'optimizer'?)" messages: the candidate at the smallest edit distance (insertions, deletions,
// substitutions, and swaps of neighbours), if that distance is small for the word's length.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace tessera::io {

std::optional<std::string> closest_name(const std::string& word,
                                        const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" for closest_name's answer, else "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace tessera::io
