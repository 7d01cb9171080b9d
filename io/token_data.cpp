#include "tessera/io/token_data.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/io/corpus_encoding.h"
#include "tessera/io/identity.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/utf8_validation.h"
#include "tessera/ops.h"

namespace tessera::io {

namespace fs = std::filesystem;

namespace {

// A corpus file must be text: UTF-8 with no NUL bytes (a binary file would otherwise train on
// garbage, or give the char tokenizer a vocabulary of random bytes).
std::string read_text_corpus_file(const std::string& path) {
  std::string text = read_text_file(path);
  const size_t nul = text.find('\0');
  TS_CHECK(nul == std::string::npos, "data: '", path, "' is not a text file (a NUL byte at offset ",
           nul, ")");
  const auto bad = first_invalid_utf8(text);
  TS_CHECK(!bad, "data: '", path, "' is not UTF-8 text (an invalid byte sequence at offset ",
           bad.value_or(0), ")");
  return text;
}

}  // namespace

std::string read_corpus(const std::string& path) {
  TS_CHECK(!path.empty(),
           "data: no corpus given (set data.path in the config or pass --data PATH)");
  TS_CHECK(fs::exists(path), "data: '", path, "' does not exist");
  if (!fs::is_directory(path)) return read_text_corpus_file(path);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(path))
    if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat")
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  TS_CHECK(!files.empty(), "data: directory '", path, "' has no text files");
  std::string text;
  for (const auto& f : files) text += read_text_corpus_file(f.string());
  return text;
}

TokenFile::TokenFile(const std::string& path) : file_(std::make_unique<MappedFile>(path)) {
  TS_CHECK(file_->size() % 4 == 0, "token file '", path, "' has ", file_->size(),
           " bytes, not a multiple of 4");
  size_ = static_cast<int64_t>(file_->size() / 4);
}

namespace {

void write_tokens(const std::string& path, const std::vector<int32_t>& ids, size_t begin,
                  size_t end) {
  write_file_atomically(path, [&](std::ostream& os) {
    os.write(reinterpret_cast<const char*>(ids.data() + begin),
             static_cast<std::streamsize>((end - begin) * 4));
  });
}

// ${XDG_CACHE_HOME:-~/.cache}/tessera/datasets/<name>-<hash of the absolute path>: always
// writable by the user, unlike the corpus's own directory (e.g. /usr/share/games/fortunes).
std::string default_cache_dir(const std::string& path) {
  const std::string abs = fs::absolute(path).lexically_normal().string();
  std::string name = fs::path(abs).filename().string();
  if (name.empty()) name = fs::path(abs).parent_path().filename().string();
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path base = xdg && *xdg     ? fs::path(xdg)
                        : home && *home ? fs::path(home) / ".cache"
                                        : fs::path(".cache");
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string>{}(abs));
  return (base / "tessera" / "datasets" / (name + "-" + hash)).string();
}

// Progress of a long tokenisation on stderr (MB/s, ETA), and its stop.
EncodeProgress corpus_progress(bool verbose, const std::function<bool()>& keep_going) {
  const auto start = std::chrono::steady_clock::now();
  auto printed = std::make_shared<double>(0.0);  // seconds in, when the last line was printed
  return [=](size_t done, size_t total) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (verbose && done < total && s - *printed >= 0.5) {  // two lines a second at most
      *printed = s;
      const double rate = static_cast<double>(done) / std::max(s, 1e-9);
      std::fprintf(stderr, "data: tokenised %.1f of %.1f MB (%.0f%%), %.1f MB/s, ETA %.0f s\n",
                   static_cast<double>(done) / 1e6, static_cast<double>(total) / 1e6,
                   100.0 * static_cast<double>(done) / static_cast<double>(total), rate / 1e6,
                   static_cast<double>(total - done) / rate);
    }
    return !keep_going || keep_going();
  };
}

void tokenize_into(const fs::path& dir, const std::string& key, const std::string& text,
                   const TokenizedCorpus& c, const TrainConfig::Data& data,
                   const EncodeProgress& progress) {
  const std::vector<int64_t> ids64 = encode_corpus(*c.tokenizer, text, progress);
  TS_CHECK(ids64.size() >= 16, "data: the corpus '", data.path, "' has only ", ids64.size(),
           " tokens");
  std::vector<int32_t> ids(ids64.begin(), ids64.end());
  const size_t split =
      static_cast<size_t>(static_cast<double>(ids.size()) * (1.0 - data.val_fraction));
  fs::create_directories(dir);
  write_tokens((dir / "train.bin").string(), ids, 0, split);
  write_tokens((dir / "val.bin").string(), ids, split, ids.size());
  write_file_atomically((dir / "meta.json").string(), [&](std::ostream& os) {
    os << nlohmann::json{{"key", key},
                         {"tokens", ids.size()},
                         {"train_tokens", split},
                         {"vocab_size", c.vocab_size},
                         {"tokenizer", data.tokenizer}}
              .dump(2);
  });
}

}  // namespace

// Why the cache's token files cannot be used as meta.json describes them ("" when they can):
// a truncated or replaced file, or ids outside the vocabulary.
std::string token_cache_problem(const std::string& cache_dir, int64_t vocab_size) {
  const fs::path dir(cache_dir);
  try {
    const std::string meta_path = (dir / "meta.json").string();
    const nlohmann::json meta_json = JsonFields::parse_file(meta_path);
    const JsonFields meta(meta_json, "'" + meta_path + "'");
    const int64_t tokens = meta.integer("tokens", 0),
                  train = meta.integer("train_tokens", 0, tokens);
    const TokenFile tr((dir / "train.bin").string()), va((dir / "val.bin").string());
    if (tr.size() != train || va.size() != tokens - train)
      return "its token files hold " + std::to_string(tr.size()) + " + " +
             std::to_string(va.size()) + " tokens, meta.json says " + std::to_string(train) +
             " + " + std::to_string(tokens - train);
    for (const TokenFile* f : {&tr, &va})
      for (int64_t i = 0; i < f->size(); ++i)
        if (f->data()[i] < 0 || f->data()[i] >= vocab_size)
          return "token " + std::to_string(f->data()[i]) + " at position " + std::to_string(i) +
                 " is outside the vocabulary of " + std::to_string(vocab_size);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TokenizedCorpus prepare_corpus(const TrainConfig::Data& data, bool with_specials, bool verbose,
                               const std::function<bool()>& keep_going) {
  TokenizedCorpus c;
  c.tokenizer_kind = data.tokenizer;
  const std::string text = read_corpus(data.path);
  // The cache is reused only for the same text, tokenizer (files included) and split; each
  // such key has a directory of its own, so switching tokenizers keeps both caches.
  std::string key = data.tokenizer + ":" + std::to_string(text.size()) + ":" + sha256_hex(text) +
                    ":" + std::to_string(data.val_fraction) + (with_specials ? ":specials" : "");
  if (data.tokenizer == "wordpiece")
    key += ":" + sha256_hex(read_text_file(data.vocab)) + (data.lower_case ? ":lower" : ":cased");
  if (data.tokenizer == "gpt2")
    key += data.tokenizer_file.empty() ? ":" + sha256_hex(read_text_file(data.vocab)) + ":" +
                                             sha256_hex(read_text_file(data.merges))
                                       : ":json:" + sha256_hex(read_text_file(data.tokenizer_file));
  c.cache_dir = (fs::path(data.cache_dir.empty() ? default_cache_dir(data.path) : data.cache_dir) /
                 (data.tokenizer + "-" + sha256_hex(key).substr(0, 16)))
                    .string();
  const fs::path meta_path = fs::path(c.cache_dir) / "meta.json";
  if (data.tokenizer == "gpt2") {
    c.tokenizer = std::make_unique<GPT2Tokenizer>(
        data.tokenizer_file.empty() ? GPT2Tokenizer::from_files(data.vocab, data.merges)
                                    : GPT2Tokenizer::from_tokenizer_json(data.tokenizer_file));
  } else if (data.tokenizer == "wordpiece") {
    auto wordpiece = std::make_unique<WordPieceTokenizer>(
        WordPieceTokenizer::from_file(data.vocab, data.lower_case));
    if (with_specials)
      for (const std::string& s : kBertSpecialTokens) {
        try {
          c.special_ids.push_back(wordpiece->token_id(s));
        } catch (const Error&) {
          fail("data: '", data.vocab, "' has no ", s, " token, which BERT's batches need");
        }
      }
    c.tokenizer = std::move(wordpiece);
  } else {
    auto chars = CharTokenizer::from_corpus(text).chars();
    c.chars = chars;
    c.tokenizer = std::make_unique<CharTokenizer>(chars);
  }
  c.vocab_size = c.tokenizer->vocab_size();
  if (with_specials && data.tokenizer != "wordpiece") {
    c.specials = kBertSpecialTokens;
    for (size_t i = 0; i < kBertSpecialTokens.size(); ++i)
      c.special_ids.push_back(c.vocab_size + int64_t(i));
    c.vocab_size += static_cast<int64_t>(kBertSpecialTokens.size());
  }
  bool fresh = false;
  if (fs::exists(meta_path)) {
    try {
      fresh = nlohmann::json::parse(read_text_file(meta_path.string())).value("key", "") == key;
    } catch (...) {
      fresh = false;
    }
  }
  if (fresh) {
    const std::string problem = token_cache_problem(c.cache_dir, c.vocab_size);
    if (!problem.empty()) {
      std::cerr << "data: warning: the token cache '" << c.cache_dir << "' is damaged (" << problem
                << "); tokenising again\n";
      fresh = false;
    }
  }
  if (!fresh) {
    if (verbose)
      std::cerr << "data: tokenising " << data.path << " (" << text.size() << " bytes) into "
                << c.cache_dir << "\n";
    tokenize_into(c.cache_dir, key, text, c, data, corpus_progress(verbose, keep_going));
    const std::string problem = token_cache_problem(c.cache_dir, c.vocab_size);
    TS_CHECK(problem.empty(), "data: the token cache '", c.cache_dir, "' just written: ", problem);
  }
  c.train = std::make_unique<TokenFile>((fs::path(c.cache_dir) / "train.bin").string());
  c.val = std::make_unique<TokenFile>((fs::path(c.cache_dir) / "val.bin").string());
  return c;
}

GPTBatchSampler::GPTBatchSampler(const TokenFile& tokens, int64_t batch, int64_t block,
                                 uint64_t seed)
    : tokens_(tokens), batch_(batch), block_(block), gen_(seed) {
  TS_CHECK(tokens.size() > block + 1, "data: a split of ", tokens.size(),
           " tokens is too short for block_size ", block);
}

void GPTBatchSampler::next(Tensor& x, Tensor& y) {
  x = Tensor::empty({batch_, block_}, DType::Int64);
  y = Tensor::empty({batch_, block_}, DType::Int64);
  int64_t* px = x.data<int64_t>();
  int64_t* py = y.data<int64_t>();
  const GeneratorState s = gen_.reserve(static_cast<uint64_t>(batch_ * shard_.world));
  const int64_t span = tokens_.size() - block_ - 1;
  for (int64_t b = 0; b < batch_; ++b) {
    const uint64_t row = static_cast<uint64_t>(shard_.rank * batch_ + b);
    const int64_t start =
        std::min<int64_t>(span, static_cast<int64_t>(philox_uniform_f64(s.seed, s.offset + row) *
                                                     static_cast<double>(span + 1)));
    const int32_t* t = tokens_.data() + start;
    for (int64_t i = 0; i < block_; ++i) {
      px[b * block_ + i] = t[i];
      py[b * block_ + i] = t[i + 1];
    }
  }
}

BertBatchSampler::BertBatchSampler(const TokenFile& tokens, int64_t batch, int64_t block,
                                   int64_t vocab, const std::vector<int64_t>& special,
                                   double mask_prob, bool nsp, uint64_t seed)
    : tokens_(tokens),
      batch_(batch),
      block_(block),
      vocab_(vocab),
      special_(special),
      mask_prob_(mask_prob),
      nsp_(nsp),
      gen_(seed) {
  TS_CHECK(special.size() == 5, "BertBatchSampler: need ids of [PAD] [UNK] [CLS] [SEP] [MASK]");
  TS_CHECK(tokens.size() > 2 * block, "data: a split of ", tokens.size(),
           " tokens is too short for block_size ", block);
}

double BertBatchSampler::uniform() {
  const GeneratorState s = gen_.reserve(1);
  return philox_uniform_f64(s.seed, s.offset);
}

BertBatch BertBatchSampler::next() {
  const int64_t CLS = special_[2], SEP = special_[3], MASK = special_[4];
  // Random replacements: the regular ids when the specials follow them (the char vocabulary),
  // else the whole vocabulary, as Hugging Face's collator draws them.
  const bool appended = special_[0] == vocab_ - 5 && special_[4] == vocab_ - 1;
  const int64_t n_random = appended ? special_[0] : vocab_;
  std::vector<int64_t> ids, tgt, types, labels;
  const int64_t span = tokens_.size() - block_;
  // Every rank draws the whole global batch (the stream stays in step) and keeps its rows.
  for (int64_t gb = 0; gb < batch_ * shard_.world; ++gb) {
    const bool mine = gb / batch_ == shard_.rank;
    std::vector<int64_t> row{CLS}, row_types{0};
    auto take = [&](int64_t start, int64_t len, int64_t type) {
      for (int64_t i = 0; i < len; ++i) {
        row.push_back(tokens_.data()[start + i]);
        row_types.push_back(type);
      }
      row.push_back(SEP);
      row_types.push_back(type);
    };
    const int64_t a_start = static_cast<int64_t>(uniform() * static_cast<double>(span));
    if (nsp_) {
      const int64_t len_a = (block_ - 3) / 2, len_b = block_ - 3 - len_a;
      take(a_start, len_a, 0);
      const bool is_next = uniform() < 0.5;
      const int64_t b_start = is_next ? std::min(a_start + len_a, span)
                                      : static_cast<int64_t>(uniform() * static_cast<double>(span));
      take(b_start, len_b, 1);
      if (mine) labels.push_back(is_next ? 0 : 1);  // HF: 0 = B continues A
    } else {
      take(a_start, block_ - 2, 0);
    }
    for (size_t i = 0; i < row.size(); ++i) {
      const bool special = std::find(special_.begin(), special_.end(), row[i]) != special_.end();
      int64_t label = -100, id = row[i];
      if (!special && uniform() < mask_prob_) {
        label = row[i];
        const double r = uniform();
        if (r < 0.8)
          id = MASK;
        else if (r < 0.9)
          id = static_cast<int64_t>(uniform() * static_cast<double>(n_random));
      }
      if (!mine) continue;
      ids.push_back(id);
      tgt.push_back(label);
      types.push_back(row_types[i]);
    }
  }
  BertBatch out;
  out.input_ids = from_vector(ids, {batch_, block_});
  out.targets = from_vector(tgt, {batch_, block_});
  out.token_type_ids = from_vector(types, {batch_, block_});
  out.attention_mask = ones({batch_, block_}, DType::Int64);
  if (nsp_) out.next_sentence_label = from_vector(labels, {batch_});
  return out;
}

}  // namespace tessera::io
