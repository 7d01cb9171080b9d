// Autoregressive sampling from a causal language model (GPT-2) with a KV cache: the prompt runs
// once, then each new token costs one position's forward pass.
#pragma once
#include <functional>
#include <vector>

#include "tessera/models/pretrained.h"
#include "tessera/rng.h"

namespace tessera::models {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = no top-k filter
  uint64_t seed = 0;
  bool use_cache = true;  // false recomputes the whole sequence each step (for testing)
};

// Returns the new token ids (not the prompt). `on_token` sees each id as it is chosen.
// Stops early at the model's context length. A model that does not generate (its
// context_length() is 0, as BERT's) is an error naming it.
std::vector<int64_t> generate(PretrainedModel& model, const std::vector<int64_t>& prompt,
                              const GenerateOptions& options,
                              const std::function<void(int64_t)>& on_token = {});

// Several prompts at once, one batch through the model with one KV cache (prompts of
// different lengths right-aligned behind filler positions no token attends to). Each prompt's
// ids are those it gets alone, to float rounding: its own draws (a generator seeded `seed`
// per prompt), its own positions. Every prompt gets the same number of new tokens: at most
// the context left after the longest prompt. `on_token(prompt, id)` sees each id as chosen.
std::vector<std::vector<int64_t>> generate_batch(
    PretrainedModel& model, const std::vector<std::vector<int64_t>>& prompts,
    const GenerateOptions& options, const std::function<void(size_t, int64_t)>& on_token = {});

// Picks the next id from one row of logits (temperature, top-k, Philox draw at `draw`).
int64_t sample_next(const Tensor& logits, const GenerateOptions& options, Generator& gen);

}  // namespace tessera::models
