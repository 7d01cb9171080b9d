// Tokenizers: character-level (built from a corpus), GPT-2 byte-level BPE (vocab.json +
// merges.txt) and BERT WordPiece (vocab.txt).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::io {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int64_t> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;

  // An encoder for one thread (never shared between threads): each call gives encode()'s ids,
  // and what it learns is kept for the next call (GPT-2: every word's ids), so a corpus encoded
  // in many chunks does not start cold at each one.
  using Encoder = std::function<std::vector<int64_t>(std::string_view text)>;
  virtual Encoder encoder() const {
    return [this](std::string_view text) { return encode(std::string(text)); };
  }
  // The texts split out whole before anything else (added and special tokens): a corpus cut
  // inside one would change the ids.
  virtual std::vector<std::string> added_token_texts() const { return {}; }
};

// One id per distinct UTF-8 character, in sorted order (nanoGPT's shakespeare_char scheme).
class CharTokenizer : public Tokenizer {
 public:
  static CharTokenizer from_corpus(const std::string& text);
  explicit CharTokenizer(std::vector<std::string> chars);
  // Unknown characters are an error naming the character and its byte offset.
  std::vector<int64_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(chars_.size()); }
  const std::vector<std::string>& chars() const { return chars_; }

 private:
  std::vector<std::string> chars_;
  std::unordered_map<std::string, int64_t> ids_;
};

// The character tokenizer as a Hugging Face tokenizer.json (WordLevel over single characters,
// `specials` appended with ids after them), which AutoTokenizer.from_pretrained loads.
std::string char_tokenizer_json(const std::vector<std::string>& chars,
                                const std::vector<std::string>& specials);

// GPT-2's byte-level BPE: the GPT-2 pre-tokenisation regex (via PCRE2), bytes mapped to
// printable characters, then merges applied by rank. Added tokens (GPT-2's <|endoftext|>)
// are split out of the text first and each becomes its own id, as Hugging Face's tokenizers do.
class GPT2Tokenizer : public Tokenizer {
 public:
  // <|endoftext|> is an added token when vocab.json has it (as GPT2TokenizerFast makes it).
  static GPT2Tokenizer from_files(const std::string& vocab_json, const std::string& merges_txt);
  // A Hugging Face tokenizer.json of GPT-2's kind (BPE, ByteLevel pre-tokenisation, no
  // normalizer), its added_tokens included; any other pipeline is refused, naming what differs.
  static GPT2Tokenizer from_tokenizer_json(const std::string& path);
  // `added_tokens` must be in `vocab`.
  GPT2Tokenizer(std::unordered_map<std::string, int64_t> vocab,
                std::vector<std::pair<std::string, std::string>> merges,
                std::vector<std::string> added_tokens = {});
  ~GPT2Tokenizer() override;
  GPT2Tokenizer(GPT2Tokenizer&&) noexcept;
  std::vector<int64_t> encode(const std::string& text) const override;
  Encoder encoder() const override;  // keeps its word cache between calls
  std::vector<std::string> added_token_texts() const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(id_to_token_.size()); }
  // The pre-tokenised pieces of `text` (exposed for tests); `pcre2_only` leaves out the ASCII
  // fast path (gpt2_ascii_pieces.h), giving the reference it is checked against.
  std::vector<std::string> pretokenize(const std::string& text, bool pcre2_only = false) const;

 private:
  struct WordCache;
  // Appends the ids of `text`, which holds no added token.
  void encode_ordinary(std::string_view text, WordCache& cache, std::vector<int64_t>& ids) const;
  void bpe(std::string_view word, std::vector<int64_t>& ids) const;  // appends word's ids
  std::unordered_map<std::string, int64_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<std::pair<std::string, int64_t>> added_;  // added token texts and ids
  std::vector<bool> is_added_;                          // by id: decoded as its text
  struct Regex;
  std::unique_ptr<Regex> regex_;
  struct Merges;  // symbols interned, merges by (left, right) symbol: gpt2_bpe.cpp
  std::unique_ptr<Merges> merges_;
};

// BERT's special tokens: the ones its batches need, in the order Tessera appends them to a
// character vocabulary (and that BertBatchSampler takes their ids in).
inline const std::vector<std::string> kBertSpecialTokens{"[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                                         "[MASK]"};

// BERT's tokenizer: its special tokens (kBertSpecialTokens, those in the vocab)
// split out first, as BertTokenizerFast does; then basic tokenisation (clean, split on
// whitespace and punctuation, CJK characters apart, optional lower-casing with accent
// stripping via utf8proc), then greedy longest-match WordPiece with "##" continuations.
class WordPieceTokenizer : public Tokenizer {
 public:
  static WordPieceTokenizer from_file(const std::string& vocab_txt, bool lower_case = true);
  WordPieceTokenizer(std::vector<std::string> vocab, bool lower_case = true);
  std::vector<int64_t> encode(const std::string& text) const override;  // no [CLS]/[SEP]
  std::vector<std::string> added_token_texts() const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(vocab_.size()); }
  std::vector<std::string> basic_tokenize(const std::string& text) const;
  int64_t token_id(const std::string& token) const;  // throws when absent
  int64_t unk_id() const { return unk_; }

 private:
  void encode_ordinary(std::string_view text, std::vector<int64_t>& ids) const;
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, int64_t> ids_;
  bool lower_case_;
  int64_t unk_ = -1;
  std::vector<std::pair<std::string, int64_t>> added_;  // BERT's special tokens in the vocab
};

}  // namespace tessera::io
