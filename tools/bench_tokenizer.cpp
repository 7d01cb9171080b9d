// `tessera bench tokenizer --vocab V --merges M --corpus FILE [--threads N] [--json]`: GPT-2 BPE
// throughput (MB/s) of Tessera's corpus encoding (as training tokenises: chunks on N threads)
// and, in the same run on the same file and thread count, of Hugging Face's `tokenizers`
// (encode_batch over the same text cut into 64 KB pieces, its fastest use) when the Python
// beside it has the package, with the ratio and whether both gave the same ids.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli.h"
#include "tessera/io/corpus_encoding.h"
#include "tessera/io/files.h"
#include "tessera/io/tokenizer.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Hugging Face's ByteLevel BPE on the same files: its MB/s and its ids' count and checksum.
constexpr const char* kHfScript = R"PY(
import json, os, sys, time
try:
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
except ImportError:
    print(json.dumps({"error": "no tokenizers package"})); sys.exit(0)
vocab, merges, corpus, threads, cuts = sys.argv[1:6]
os.environ["RAYON_NUM_THREADS"] = threads
tok = Tokenizer(models.BPE.from_file(vocab, merges))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
data = open(corpus, "rb").read()
cuts = [int(c) for c in open(cuts).read().split()]
pieces = [data[a:b].decode("utf-8") for a, b in zip(cuts, cuts[1:])]
t0 = time.perf_counter()
ids = [i for e in tok.encode_batch(pieces, add_special_tokens=False) for i in e.ids]
s = time.perf_counter() - t0
print(json.dumps({"seconds": s, "count": len(ids), "checksum": sum((k + 1) * v for k, v in enumerate(ids)) % (1 << 61)}))
)PY";

int64_t checksum(const std::vector<int64_t>& ids) {
  unsigned __int128 sum = 0;
  for (size_t k = 0; k < ids.size(); ++k) sum += static_cast<unsigned __int128>(k + 1) * ids[k];
  return static_cast<int64_t>(sum % (static_cast<unsigned __int128>(1) << 61));
}

}  // namespace

int bench_tokenizer(const Args& a) {
  for (const char* k : {"vocab", "merges", "corpus"})
    TS_CHECK(a.has(k), "bench tokenizer: --", k, " is required (--vocab vocab.json --merges ",
             "merges.txt --corpus FILE)");
  const std::string vocab = a.get("vocab", ""), merges = a.get("merges", ""),
                    corpus = a.get("corpus", "");
  const int threads = static_cast<int>(
      a.get_int("threads", std::max<int64_t>(1, std::thread::hardware_concurrency())));
  TS_CHECK(threads >= 1 && threads <= 1024, "bench tokenizer: --threads must be in [1, 1024]");
  const io::GPT2Tokenizer tok = io::GPT2Tokenizer::from_files(vocab, merges);
  const std::string text = io::read_text_file(corpus);
  const double mb = static_cast<double>(text.size()) / 1e6;
  const auto t0 = Clock::now();
  const std::vector<int64_t> ids = io::encode_corpus(tok, text, nullptr, threads);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  nlohmann::ordered_json out{{"bytes", text.size()},
                             {"tokens", ids.size()},
                             {"threads", threads},
                             {"tessera_mb_per_s", mb / seconds}};
  // HF's, in a Python of its own (the one of scripts/test_python.sh when there is one).
  const std::string python =
      a.get("python", fs::exists("build/test-python/bin/python") ? "build/test-python/bin/python"
                                                                 : "python3");
  const std::string tag = std::to_string(::getpid());
  const fs::path script = fs::temp_directory_path() / ("tessera-bench-tokenizer-" + tag + ".py");
  const fs::path cuts = fs::temp_directory_path() / ("tessera-bench-cuts-" + tag + ".txt");
  std::ofstream(script) << kHfScript;
  {
    std::ofstream c(cuts);  // the same safe cut places, 64 KB apart
    for (size_t at : io::corpus_cuts(text, 64 << 10)) c << at << "\n";
  }
  const std::string command = io::quoted(python) + " " + io::quoted(script.string()) + " " +
                              io::quoted(vocab) + " " + io::quoted(merges) + " " +
                              io::quoted(corpus) + " " + std::to_string(threads) + " " +
                              io::quoted(cuts.string()) + " 2>/dev/null";
  const std::string reply = command_output(command);
  fs::remove(script);
  fs::remove(cuts);
  const auto hf = nlohmann::json::parse(reply, nullptr, false);
  if (hf.is_object() && hf.contains("seconds")) {
    out["hf_mb_per_s"] = mb / hf["seconds"].get<double>();
    out["ratio"] = out["tessera_mb_per_s"].get<double>() / out["hf_mb_per_s"].get<double>();
    out["same_ids"] = hf["count"] == ids.size() && hf["checksum"] == checksum(ids);
  } else {
    out["hf"] = hf.is_object() && hf.contains("error") ? hf["error"] : "no Python";
  }
  if (a.has("json")) {
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::printf("corpus %s: %.1f MB, %zu tokens\ntessera: %.1f MB/s (%d threads)\n", corpus.c_str(),
              mb, ids.size(), out["tessera_mb_per_s"].get<double>(), threads);
  if (out.contains("ratio"))
    std::printf(
        "Hugging Face tokenizers: %.1f MB/s (%d threads, encode_batch of 64 KB pieces); ratio "
        "%.2fx; same ids: %s\n",
        out["hf_mb_per_s"].get<double>(), threads, out["ratio"].get<double>(),
        out["same_ids"].get<bool>() ? "yes" : "NO");
  else
    std::printf("Hugging Face tokenizers: not run (%s)\n", out["hf"].get<std::string>().c_str());
  return 0;
}

}  // namespace tessera::cli
