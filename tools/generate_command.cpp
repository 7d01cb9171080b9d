// `tessera generate MODEL_DIR (--prompt TEXT | --prompt-ids 1,2,3) [...]`
#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "tessera/cuda.h"
#include "tessera/dtype.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/io/tokenizer.h"
#include "tessera/models/generate.h"
#include "tessera/models/pretrained.h"
#include "tessera/parallel/process_group.h"

namespace tessera::cli {

namespace {

const char* kGenerateHelp =
    R"(usage: tessera generate MODEL_DIR (--prompt TEXT | --prompts FILE | --prompt-ids 1,2,3[;4,5])
                        [--tokenizer DIR] [--max-new-tokens N] [--temperature T] [--top-k K]
                        [--seed S] [--device D] [--dtype T] [--json]

Samples from a GPT-2 model directory (config.json + model.safetensors) with a KV cache, so
each new token costs one position's forward pass. Text prompts need GPT-2's vocab.json and
merges.txt (or its tokenizer.json), or the tessera_chars.json `tessera export` writes for
character-level models, looked up in --tokenizer DIR (default: MODEL_DIR). --temperature 0 is
greedy. Generation stops at the model's context (n_positions), and says so.
Defaults: --max-new-tokens 64 --temperature 1.0 --top-k 0 (off) --seed 0 --device cpu
--dtype float32 (bfloat16, float16 and float64 too).
Tensor parallel: mpirun -np N tessera generate ... splits the model's heads, MLP and
vocabulary over the N ranks (NCCL with --device cuda: each rank its local GPU); the ids are
one process's, and rank 0 prints.
With --json the last line is {"prompt_ids": [...], "ids": [...], "text": "...",
"stopped_at_context": false, "tokens_per_s": R}.

Several prompts (--prompts FILE: one per line, empty lines skipped; --prompt-ids with ';'
between prompts) run as one batch: each continuation is the one its prompt gets alone (its
own draws from --seed), and every prompt gets the same number of new tokens, at most the
context left after the longest. --json: {"outputs": [{"prompt_ids", "ids", "text"}...],
"stopped_at_context", "tokens_per_s"}.
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

// One prompt of --prompt-ids: comma-separated token ids (prompt `index` of the option).
std::vector<int64_t> parse_ids(const std::string& text, size_t index) {
  std::vector<int64_t> ids;
  std::stringstream parts(text);
  for (std::string part; std::getline(parts, part, ',');) {
    int64_t id = -1;
    const auto [end, err] = std::from_chars(part.data(), part.data() + part.size(), id);
    TS_CHECK(err == std::errc() && end == part.data() + part.size() && id >= 0,
             "generate: --prompt-ids: prompt ", index, " holds '", part,
             "', expected token ids like 1,2,3 (prompts separated by ';')");
    ids.push_back(id);
  }
  TS_CHECK(!ids.empty(), "generate: --prompt-ids: prompt ", index, " is empty");
  return ids;
}

// The prompts as ids: --prompt TEXT, --prompts FILE (one per line, empty lines skipped) or
// --prompt-ids "1,2,3;4,5" (';' between prompts).
std::vector<std::vector<int64_t>> read_prompts(const Args& a, const io::Tokenizer* tok) {
  std::vector<std::vector<int64_t>> prompts;
  if (a.has("prompt-ids")) {
    std::stringstream all(a.get("prompt-ids", ""));
    for (std::string one; std::getline(all, one, ';');)
      prompts.push_back(parse_ids(one, prompts.size()));
    TS_CHECK(!prompts.empty(), "generate: --prompt-ids is empty");
    return prompts;
  }
  if (a.has("prompt")) return {tok->encode(a.get("prompt", ""))};
  const std::string path = a.get("prompts", "");
  std::stringstream lines(io::read_text_file(path));
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) prompts.push_back(tok->encode(line));
  TS_CHECK(!prompts.empty(), "generate: --prompts ", io::quoted(path), " holds no prompt");
  return prompts;
}

// --device: "cuda" under a launcher is this rank's local GPU.
Device generate_device(const Args& a) {
  Device device = Device::parse(a.get("device", "cpu"));
  if (a.get("device", "cpu") == "cuda" && parallel::launched_distributed())
    device = Device::cuda(parallel::local_device_index());
  require_usable_device(device, "generate: --device");
  return device;
}

// Under mpirun with 2 or more ranks: tensor-parallel inference over all of them (NCCL on
// GPUs), each rank holding its shard of the layers; the ranks generate in lockstep.
parallel::ParallelContext tensor_parallel_context(const Args& a) {
  if (!parallel::launched_distributed()) return {};
  std::shared_ptr<parallel::ProcessGroup> world = parallel::world();
  if (world->size() == 1) return {};
  const Device device = generate_device(a);
  return {device.is_cuda() ? parallel::make_nccl_group(world, device) : world};
}

// --device and --dtype: the model moved and cast as asked (a GPU that is not there, or an
// integer dtype, is an error naming the option).
void place_model(models::PretrainedModel& model, const Args& a) {
  const Device device = generate_device(a);
  const DType dtype = dtype_from_name(a.get("dtype", "float32"));
  TS_CHECK(is_floating(dtype), "generate: --dtype must be a floating type, got ",
           dtype_name(dtype));
  model.to(device);
  model.to(dtype);
}

// Whether generation stops at the model's context before --max-new-tokens, said on stderr
// rather than stopping short silently; a prompt that leaves no room is an error. Every prompt
// of a batch gets the room its longest leaves.
bool stops_at_context(const models::PretrainedModel& model,
                      const std::vector<std::vector<int64_t>>& prompts,
                      const models::GenerateOptions& o, bool lead) {
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int64_t context = model.context_length();
  const bool batch = prompts.size() > 1;
  TS_CHECK(static_cast<int64_t>(longest) < context, "generate: the ", batch ? "longest " : "",
           "prompt is ", longest, " tokens; the model's context is ", context);
  const int64_t room = context - static_cast<int64_t>(longest);
  if (o.max_new_tokens <= room) return false;
  if (lead)
    std::cerr << "generate: the model's context is " << context << " tokens; " << room
              << " new tokens fit after the " << (batch ? "longest (" : "") << longest << "-token"
              << (batch ? ") prompt, for every prompt of the batch" : " prompt")
              << " (--max-new-tokens " << o.max_new_tokens << ")\n";
  return true;
}

// Several prompts in one batch: each continuation once they are all done; --json's last line
// {"outputs": [{"prompt_ids", "ids", "text"}...], "stopped_at_context", "tokens_per_s"}.
int print_batch(models::PretrainedModel& model, const std::vector<std::vector<int64_t>>& prompts,
                const models::GenerateOptions& o, const io::Tokenizer* tok, bool json, bool lead) {
  const bool truncated = stops_at_context(model, prompts, o, lead);
  const auto t0 = std::chrono::steady_clock::now();
  const auto outputs = models::generate_batch(model, prompts, o);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t tokens = 0;
  for (const auto& ids : outputs) tokens += static_cast<int64_t>(ids.size());
  const double rate = tokens == 0 ? 0.0 : static_cast<double>(tokens) / secs;
  nlohmann::json all = nlohmann::json::array();
  for (size_t r = 0; r < prompts.size(); ++r) {
    nlohmann::json one{{"prompt_ids", prompts[r]}, {"ids", outputs[r]}};
    if (tok) one["text"] = tok->decode(outputs[r]);
    all.push_back(one);
    if (json) continue;
    std::cout << "--- prompt " << r << "\n";
    if (tok) {
      std::cout << tok->decode(prompts[r]) << tok->decode(outputs[r]) << "\n";
    } else {
      for (int64_t id : outputs[r]) std::cout << id << " ";
      std::cout << "\n";
    }
  }
  if (json)
    std::cout << nlohmann::json{{"outputs", all},
                                {"stopped_at_context", truncated},
                                {"tokens_per_s", rate}}
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  else if (lead)
    std::cerr << "[" << prompts.size() << " prompts, " << tokens << " tokens, "
              << static_cast<int64_t>(rate) << " tokens/s]\n";
  return 0;
}

}  // namespace

int generate_main(int argc, char** argv) {
  const Args a(argc, argv, 2, {"json", "help"},
               {"prompt", "prompts", "prompt-ids", "tokenizer", "max-new-tokens", "temperature",
                "top-k", "seed", "device", "dtype"});
  if (a.has("help")) {
    std::cout << kGenerateHelp;
    return 0;
  }
  TS_CHECK(a.positional().size() == 1, "generate: expected one MODEL_DIR (see --help)");
  TS_CHECK(a.has("prompt") + a.has("prompts") + a.has("prompt-ids") == 1,
           "generate: give exactly one of --prompt, --prompts or --prompt-ids");
  const std::string dir = a.positional()[0];
  const parallel::ParallelContext ctx = tensor_parallel_context(a);
  // Tensor parallel: rank 0 prints; the others compute their shards of every step.
  const bool lead = ctx.tensor_parallel_rank() == 0;
  if (!lead) std::cout.setstate(std::ios::failbit);
  auto model = models::load_pretrained_shard(dir, ctx);
  TS_CHECK(model->context_length() > 0, "generate: '", dir, "' holds a ", model->type_name(),
           "; generation needs a causal language model (GPT-2)");

  const std::filesystem::path tdir = a.get("tokenizer", dir);
  const std::unique_ptr<io::Tokenizer> tok = tokenizer_in(tdir);
  TS_CHECK(tok || a.has("prompt-ids"), "generate: text prompts need a tokenizer, but '",
           tdir.string(),
           "' has neither vocab.json and merges.txt, tokenizer.json nor tessera_chars.json; pass "
           "--tokenizer DIR "
           "or use --prompt-ids");

  models::GenerateOptions o;
  o.max_new_tokens = a.get_int("max-new-tokens", 64);
  o.temperature = a.get_number("temperature", 1.0);
  o.top_k = a.get_int("top-k", 0);
  o.seed = static_cast<uint64_t>(a.get_int("seed", 0));
  TS_CHECK(o.temperature >= 0, "--temperature must be >= 0, got ", o.temperature);
  place_model(*model, a);
  const std::vector<std::vector<int64_t>> prompts = read_prompts(a, tok.get());
  if (prompts.size() > 1) return print_batch(*model, prompts, o, tok.get(), a.has("json"), lead);
  const std::vector<int64_t>& prompt = prompts[0];
  TS_CHECK(!prompt.empty(), "generate: the prompt is empty");
  const bool truncated = stops_at_context(*model, prompts, o, lead);
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
    if (lead)
      std::cerr << "[" << ids.size() << " tokens, " << static_cast<int64_t>(rate) << " tokens/s]\n";
  }
  return 0;
}

}  // namespace tessera::cli
