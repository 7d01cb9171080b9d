// Training data: a text corpus (one file, or every regular non-.dat file of a directory in
// name order) tokenised once into memory-mapped token files with a train/validation split,
// and seeded batch samplers whose position is a Philox (seed, offset) pair that checkpoints
// save.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/io/files.h"
#include "tessera/io/tokenizer.h"
#include "tessera/io/train_config.h"
#include "tessera/rng.h"
#include "tessera/tensor.h"

namespace tessera::io {

// Concatenated text of a file or directory (symlinks and *.dat index files skipped).
std::string read_corpus(const std::string& path);

class TokenFile {
 public:
  explicit TokenFile(const std::string& path);  // int32 little-endian tokens
  int64_t size() const { return size_; }
  const int32_t* data() const { return reinterpret_cast<const int32_t*>(file_->data()); }

 private:
  std::unique_ptr<MappedFile> file_;
  int64_t size_ = 0;
};

struct TokenizedCorpus {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<TokenFile> train, val;
  int64_t vocab_size = 0;
  std::string tokenizer_kind;         // "char", "gpt2" or "wordpiece"
  std::vector<std::string> chars;     // char tokenizer's vocabulary (saved with checkpoints)
  std::vector<std::string> specials;  // appended ids for BERT: [PAD] [UNK] [CLS] [SEP] [MASK]
  // BERT's [PAD] [UNK] [CLS] [SEP] [MASK] ids: appended to the char vocabulary, WordPiece's own.
  std::vector<int64_t> special_ids;
  std::string cache_dir;
};

// Tokenises data.path into a cache (under data.cache_dir, default
// ~/.cache/tessera/datasets/<name>-<hash>/, one subdirectory per tokenizer: <kind>-<digest of
// the text, the tokenizer's files and the split>, so caches of several tokenizers coexist)
// unless an up-to-date one is there. with_specials adds BERT's special tokens (to the char
// vocabulary; WordPiece's vocab.txt has its own). The corpus is
// encoded on every core in chunks; `verbose` prints progress (MB/s, ETA) and `keep_going`,
// asked between chunks, stops the work (an Error) when it returns false.
TokenizedCorpus prepare_corpus(const TrainConfig::Data& data, bool with_specials, bool verbose,
                               const std::function<bool()>& keep_going = nullptr);

// Why a token cache directory (meta.json, train.bin, val.bin) cannot be used as its meta.json
// describes it for a vocabulary of `vocab_size` ("" when it can): prepare_corpus rebuilds such
// a cache.
std::string token_cache_problem(const std::string& cache_dir, int64_t vocab_size);

// Random windows of T+1 tokens: x = tokens[i, i+T), y = tokens[i+1, i+T+1).
class GPTBatchSampler {
 public:
  GPTBatchSampler(const TokenFile& tokens, int64_t batch, int64_t block, uint64_t seed);
  void next(Tensor& x, Tensor& y);
  GeneratorState state() const { return gen_.state(); }
  void set_state(GeneratorState s) { gen_.set_state(s); }
  // Data parallelism: the stream draws world * batch rows per call and this rank keeps rows
  // [rank * batch, (rank + 1) * batch), so N ranks see exactly the rows one process with
  // an N times larger batch would (and the position is the same on every rank).
  void shard(int rank, int world) { shard_ = make_data_parallel_shard(rank, world); }

 private:
  const TokenFile& tokens_;
  int64_t batch_, block_;
  DataParallelShard shard_;
  Generator gen_;
};

// BERT masked-LM batches: windows framed as [CLS] A [SEP] (or [CLS] A [SEP] B [SEP] with NSP,
// B following A half the time), 15% of non-special positions selected: 80% -> [MASK],
// 10% -> a random token, 10% unchanged; targets hold the original ids there, -100 elsewhere.
struct BertBatch {
  Tensor input_ids, targets, token_type_ids, attention_mask, next_sentence_label;
};
class BertBatchSampler {
 public:
  BertBatchSampler(const TokenFile& tokens, int64_t batch, int64_t block, int64_t vocab_size,
                   const std::vector<int64_t>& special_ids /* PAD UNK CLS SEP MASK */,
                   double mask_prob, bool nsp, uint64_t seed);
  BertBatch next();
  GeneratorState state() const { return gen_.state(); }
  void set_state(GeneratorState s) { gen_.set_state(s); }
  void shard(int rank, int world) { shard_ = make_data_parallel_shard(rank, world); }  // as GPT's

 private:
  DataParallelShard shard_;
  double uniform();
  const TokenFile& tokens_;
  int64_t batch_, block_, vocab_;
  std::vector<int64_t> special_;
  double mask_prob_;
  bool nsp_;
  Generator gen_;
};

}  // namespace tessera::io
