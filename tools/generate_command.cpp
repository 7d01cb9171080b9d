// `tessera generate MODEL_DIR (--prompt TEXT | --prompt-ids 1,2,3) [...]`
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/tokenizer.h"
#include "tessera/models/generate.h"

namespace tessera::cli {

namespace {

const char* kGenerateHelp =
    R"(usage: tessera generate MODEL_DIR (--prompt TEXT | --prompt-ids 1,2,3)
                        [--tokenizer DIR] [--max-new-tokens N] [--temperature T] [--top-k K]
                        [--seed S] [--json]

Samples from a GPT-2 model directory (config.json + model.safetensors) with a KV cache, so
each new token costs one position's forward pass. Text prompts need GPT-2's vocab.json and
merges.txt (or its tokenizer.json), or the tessera_chars.json `tessera export` writes for
character-level models, looked up in --tokenizer DIR (default: MODEL_DIR). --temperature 0 is greedy. Generation
stops at the model's context (n_positions), and says so.
Defaults: --max-new-tokens 64 --temperature 1.0 --top-k 0 (off) --seed 0.
With --json the last line is {"prompt_ids": [...], "ids": [...], "text": "...",
"stopped_at_context": false, "tokens_per_s": R}.
)";

// The tokenizer files in `dir`: GPT-2's vocab.json + merges.txt, the character vocabulary
// `tessera export` writes for char-level models, or GPT-2's tokenizer.json; null when there
// are none.
std::unique_ptr<io::Tokenizer> tokenizer_in(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "vocab.json") && std::filesystem::exists(dir / "merges.txt"))
    return std::make_unique<io::GPT2Tokenizer>(io::GPT2Tokenizer::from_files(
        (dir / "vocab.json").string(), (dir / "merges.txt").string()));
  const std::filesystem::path chars = dir / "tessera_chars.json";
  if (!std::filesystem::exists(chars)) {
    if (!std::filesystem::exists(dir / "tokenizer.json")) return nullptr;
    return std::make_unique<io::GPT2Tokenizer>(
        io::GPT2Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string()));
  }
  const nlohmann::json j = io::JsonFields::parse_file(chars.string());
  const io::JsonFields f(j, io::quoted(chars.string()));
  std::vector<std::string> vocab;
  for (const auto& c : f.array("chars")) {
    TS_CHECK(c.is_string(), f.where(), ": 'chars' must hold strings, found ", c.dump());
    vocab.push_back(c.get<std::string>());
  }
  return std::make_unique<io::CharTokenizer>(std::move(vocab));
}

std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  for (int64_t v : parse_shape(text)) ids.push_back(v);
  return ids;
}

}  // namespace

int generate_main(int argc, char** argv) {
  const Args a(
      argc, argv, 2, {"json", "help"},
      {"prompt", "prompt-ids", "tokenizer", "max-new-tokens", "temperature", "top-k", "seed"});
  if (a.has("help")) {
    std::cout << kGenerateHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "generate: expected one MODEL_DIR (see --help)");
  TS_CHECK(a.has("prompt") != a.has("prompt-ids"),
           "generate: give exactly one of --prompt or --prompt-ids");
  const std::string dir = a.positional()[0];
  auto model = models::load_pretrained(dir);
  TS_CHECK(model->context_length() > 0, "generate: '", dir, "' holds a ", model->type_name(),
           "; generation needs a causal language model (GPT-2)");

  const std::filesystem::path tdir = a.get("tokenizer", dir);
  const std::unique_ptr<io::Tokenizer> tok = tokenizer_in(tdir);
  TS_CHECK(tok || a.has("prompt-ids"), "generate: --prompt needs a tokenizer, but '", tdir.string(),
           "' has neither vocab.json and merges.txt, tokenizer.json nor tessera_chars.json; pass "
           "--tokenizer DIR "
           "or use --prompt-ids");

  models::GenerateOptions o;
  o.max_new_tokens = a.get_int("max-new-tokens", 64);
  o.temperature = a.get_number("temperature", 1.0);
  o.top_k = a.get_int("top-k", 0);
  o.seed = static_cast<uint64_t>(a.get_int("seed", 0));
  TS_CHECK(o.temperature >= 0, "--temperature must be >= 0, got ", o.temperature);
  const std::vector<int64_t> prompt =
      a.has("prompt") ? tok->encode(a.get("prompt", "")) : parse_ids(a.get("prompt-ids", ""));
  const int64_t context = model->context_length();
  TS_CHECK(!prompt.empty(), "generate: the prompt is empty");
  TS_CHECK(static_cast<int64_t>(prompt.size()) < context, "generate: the prompt is ", prompt.size(),
           " tokens; the model's context is ", context);
  // The model sees at most n_positions tokens: say so rather than stop short silently.
  const int64_t room = context - static_cast<int64_t>(prompt.size());
  const bool truncated = o.max_new_tokens > room;
  if (truncated)
    std::cerr << "generate: the model's context is " << context << " tokens; " << room
              << " new tokens fit after the " << prompt.size() << "-token prompt (--max-new-tokens "
              << o.max_new_tokens << ")\n";
  const bool json = a.has("json");
  if (!json && tok) std::cout << a.get("prompt", tok->decode(prompt)) << std::flush;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int64_t> ids = models::generate(*model, prompt, o, [&](int64_t id) {
    if (json) return;
    if (tok)
      std::cout << tok->decode({id}) << std::flush;
    else
      std::cout << id << " " << std::flush;
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double rate = ids.empty() ? 0.0 : static_cast<double>(ids.size()) / secs;
  if (json) {
    nlohmann::json j{{"prompt_ids", prompt},
                     {"ids", ids},
                     {"stopped_at_context", truncated},
                     {"tokens_per_s", rate}};
    if (tok) j["text"] = tok->decode(ids);
    // Byte-level tokens may split a character: invalid UTF-8 becomes U+FFFD, as HF decodes.
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "\n";
    std::cerr << "[" << ids.size() << " tokens, " << static_cast<int64_t>(rate) << " tokens/s]\n";
  }
  return 0;
}

}  // namespace tessera::cli
