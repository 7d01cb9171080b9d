// GPT-2's merges as integers (private to io/): every symbol the vocabulary, the merges or a
// byte names is interned, and a merge rule is found by its two symbols' ids.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/io/tokenizer.h"

namespace tessera::io {

struct GPT2Tokenizer::Merges {
  struct Rule {
    int64_t rank;
    int32_t merged;
  };
  Merges(const std::unordered_map<std::string, int64_t>& vocab,
         const std::vector<std::pair<std::string, std::string>>& merges,
         const std::array<std::string, 256>& byte_text);
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  int32_t intern(const std::string& s);

  std::unordered_map<std::string, int32_t> ids;
  std::vector<std::string> text;  // by symbol id
  std::vector<int64_t> vocab_id;  // by symbol id; -1: not in vocab.json
  std::array<int32_t, 256> byte_symbol{};
  std::unordered_map<uint64_t, Rule> rules;
};

}  // namespace tessera::io
