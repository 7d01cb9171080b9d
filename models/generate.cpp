#include "tessera/models/generate.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::models {

int64_t sample_next(const Tensor& logits, const GenerateOptions& o, Generator& gen) {
  std::vector<double> l = logits.to_vector();
  const int64_t V = static_cast<int64_t>(l.size());
  if (o.temperature <= 0.0)
    return static_cast<int64_t>(std::max_element(l.begin(), l.end()) - l.begin());
  if (o.top_k > 0 && o.top_k < V) {
    std::vector<double> sorted = l;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                     std::greater<>());
    const double kth = sorted[o.top_k - 1];
    for (double& x : l)
      if (x < kth) x = -INFINITY;
  }
  const double m = *std::max_element(l.begin(), l.end());
  double total = 0;
  for (double& x : l) total += (x = std::exp((x - m) / o.temperature));
  const GeneratorState s = gen.reserve(1);
  double u = philox_uniform_f64(s.seed, s.offset) * total;
  for (int64_t i = 0; i < V; ++i) {
    u -= l[i];
    if (u < 0) return i;
  }
  return V - 1;
}

std::vector<int64_t> generate(PretrainedModel& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& o,
                              const std::function<void(int64_t)>& on_token) {
  TS_CHECK(!prompt.empty(), "generate: the prompt is empty");
  std::function<void(size_t, int64_t)> each;
  if (on_token) each = [&](size_t, int64_t id) { on_token(id); };
  return generate_batch(model, {prompt}, o, each)[0];
}

namespace {

// The batch's tokens so far [B, T]: the prompts right-aligned behind filler id 0, then each
// row's new ids; sets the cache's left padding (none when every prompt has the same length).
Tensor batch_tokens(const std::vector<std::vector<int64_t>>& prompts,
                    const std::vector<std::vector<int64_t>>& generated, int64_t longest,
                    KVCache& cache, Device device) {
  const auto B = static_cast<int64_t>(prompts.size());
  const int64_t T = longest + static_cast<int64_t>(generated[0].size());
  std::vector<int64_t> ids(static_cast<size_t>(B * T), 0);
  cache.left_padding.clear();
  for (size_t r = 0; r < prompts.size(); ++r) {
    const int64_t pad = longest - static_cast<int64_t>(prompts[r].size());
    cache.left_padding.push_back(pad);
    auto row = ids.begin() + static_cast<int64_t>(r) * T + pad;
    row = std::copy(prompts[r].begin(), prompts[r].end(), row);
    std::copy(generated[r].begin(), generated[r].end(), row);
  }
  // (No padding: the model's plain path, with no key mask.)
  if (std::all_of(cache.left_padding.begin(), cache.left_padding.end(),
                  [](int64_t p) { return p == 0; }))
    cache.left_padding.clear();
  return from_vector(ids, {B, T}).to(device);
}

}  // namespace

std::vector<std::vector<int64_t>> generate_batch(
    PretrainedModel& model, const std::vector<std::vector<int64_t>>& prompts,
    const GenerateOptions& o, const std::function<void(size_t, int64_t)>& on_token) {
  const int64_t context = model.context_length();
  TS_CHECK(context > 0, "generate: a ", model.type_name(),
           " does not generate text (it is not a causal language model such as GPT-2)");
  TS_CHECK(!prompts.empty(), "generate: no prompts");
  TS_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  TS_CHECK(o.top_k >= 0, "generate: top_k must be >= 0, got ", o.top_k);
  const auto B = static_cast<int64_t>(prompts.size());
  int64_t longest = 0;
  for (size_t r = 0; r < prompts.size(); ++r) {
    TS_CHECK(!prompts[r].empty(), "generate: prompt ", r, " is empty");
    for (int64_t id : prompts[r])
      TS_CHECK(id >= 0 && id < model.vocab_size(), "generate: prompt ", r, ": id ", id,
               " is outside the vocabulary of ", model.vocab_size());
    longest = std::max(longest, static_cast<int64_t>(prompts[r].size()));
  }
  TS_CHECK(longest < context, "generate: the longest prompt is ", longest,
           " tokens; the model's context is ", context);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Device dev = model.parameters().front().device();
  std::vector<std::unique_ptr<Generator>> gens;  // (a Generator holds a mutex: not copyable)
  for (size_t r = 0; r < prompts.size(); ++r) gens.push_back(std::make_unique<Generator>(o.seed));
  std::vector<std::vector<int64_t>> out(prompts.size());
  KVCache cache;
  Tensor next_input = batch_tokens(prompts, out, longest, cache, dev);
  const int64_t steps = std::min(o.max_new_tokens, context - longest);
  for (int64_t step = 0; step < steps; ++step) {
    Tensor logits;
    if (o.use_cache) {
      logits = model.forward_cached(next_input, cache);
    } else {  // (testing: the whole sequence again, through a cache that starts empty)
      KVCache fresh;
      logits = model.forward_cached(batch_tokens(prompts, out, longest, fresh, dev), fresh);
    }
    const Tensor last = logits.select(1, -1);  // [B, V]
    std::vector<int64_t> ids(static_cast<size_t>(B));
    for (int64_t r = 0; r < B; ++r) {
      const auto row = static_cast<size_t>(r);
      ids[row] = sample_next(last.select(0, r), o, *gens[row]);
      out[row].push_back(ids[row]);
      if (on_token) on_token(row, ids[row]);
    }
    next_input = from_vector(ids, {B, 1}).to(dev);
  }
  model.train(was_training);
  return out;
}

}  // namespace tessera::models
