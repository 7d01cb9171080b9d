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
    int32_t rank;
    int32_t merged;
  };
  // Pair -> rule, open addressing over a flat array (a lookup per pair of every new word: a
  // node-based map's pointer chase was a tenth of encoding time).
  class RuleTable {
   public:
    void reserve(size_t rules);
    void insert(uint64_t key, Rule rule);  // keeps the first rule of a key
    const Rule* find(uint64_t key) const {
      for (size_t i = slot(key);; i = (i + 1) & mask_) {
        if (keys_[i] == key) return &rules_[i];
        if (keys_[i] == kEmpty) return nullptr;
      }
    }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // no pair of two ids >= 0
    size_t slot(uint64_t key) const {
      return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
    }
    std::vector<uint64_t> keys_;
    std::vector<Rule> rules_;
    size_t mask_ = 0;
    int shift_ = 64;
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
  RuleTable rules;
};

}  // namespace tessera::io
