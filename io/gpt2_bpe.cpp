// GPT-2's byte-level BPE on one pre-tokenised piece, in O(n log n) for a piece of n bytes:
// symbols are interned once (a merge is a lookup of two integers, not of two strings) and
// merges are applied from a heap by (rank, position), as Hugging Face's tokenizers do, instead
// of rescanning the piece for its best pair after every merge (quadratic on long pieces such
// as a run of 10,000 spaces).
#include <bit>
#include <queue>

#include "gpt2_merges.h"
#include "tessera/error.h"

namespace tessera::io {

int32_t GPT2Tokenizer::Merges::intern(const std::string& s) {
  auto [it, fresh] = ids.emplace(s, static_cast<int32_t>(text.size()));
  if (fresh) text.push_back(s);
  return it->second;
}

void GPT2Tokenizer::Merges::RuleTable::reserve(size_t rules) {
  size_t capacity = 16;
  while (capacity < 2 * rules) capacity *= 2;  // at most half full: short probes
  keys_.assign(capacity, kEmpty);
  rules_.assign(capacity, Rule{});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
}

void GPT2Tokenizer::Merges::RuleTable::insert(uint64_t key, Rule rule) {
  size_t i = slot(key);
  while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
  if (keys_[i] == key) return;
  keys_[i] = key;
  rules_[i] = rule;
}

GPT2Tokenizer::Merges::Merges(const std::unordered_map<std::string, int64_t>& vocab,
                              const std::vector<std::pair<std::string, std::string>>& merges,
                              const std::array<std::string, 256>& byte_text) {
  TS_CHECK(merges.size() < (size_t{1} << 30), "GPT2Tokenizer: ", merges.size(),
           " merges is more than any vocabulary needs");
  for (int b = 0; b < 256; ++b) byte_symbol[b] = intern(byte_text[b]);
  rules.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    const int32_t left = intern(a), right = intern(b), merged = intern(a + b);
    // The first listing of a pair is its rank (a later duplicate never applies).
    rules.insert(key(left, right), Rule{static_cast<int32_t>(r), merged});
  }
  vocab_id.assign(text.size(), -1);
  for (size_t i = 0; i < text.size(); ++i)
    if (auto it = vocab.find(text[i]); it != vocab.end()) vocab_id[i] = it->second;
}

void GPT2Tokenizer::bpe(std::string_view word, std::vector<int64_t>& ids) const {
  const Merges& m = *merges_;
  const int n = static_cast<int>(word.size());
  std::vector<int32_t> sym(static_cast<size_t>(n));
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    sym[i] = m.byte_symbol[static_cast<unsigned char>(word[i])];
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int left;
    int32_t a, b, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto offer = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    if (const Merges::Rule* r = m.rules.find(Merges::key(sym[left], sym[next[left]])))
      heap.push({r->rank, left, sym[left], sym[next[left]], r->merged});
  };
  for (int i = 0; i + 1 < n; ++i) offer(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int right = next[c.left];
    // Stale: the pair changed since it was offered (a neighbour merged, or this one did).
    if (sym[c.left] != c.a || right < 0 || sym[right] != c.b) continue;
    sym[c.left] = c.merged;
    sym[right] = -1;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    offer(prev[c.left]);
    offer(c.left);
  }
  for (int i = 0; i >= 0 && i < n; i = next[i]) {
    const int64_t id = m.vocab_id[sym[i]];
    TS_CHECK(id >= 0, "GPT2Tokenizer: symbol '", m.text[sym[i]], "' (from '", std::string(word),
             "') is not in vocab.json; the vocabulary and merges do not match");
    ids.push_back(id);
  }
}

}  // namespace tessera::io
