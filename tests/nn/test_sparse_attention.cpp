// DeepSpeed's block-sparse attention layouts (nn/sparsity_config.h) against DeepSpeed's own
// sparsity config classes, and nn::PythonRandom against CPython's random module: fixtures from
// tests/fixtures/generate_sparsity_fixtures.py (every mode, uni- and bidirectional, per-head
// layouts, random blocks drawn from Python's generator after random.seed). Bad keys are
// errors naming the key. block_sparse_attention over a dense layout is scaled dot-product
// attention, and over a fixed layout the same under the layout's mask (its checks against
// PyTorch are the op catalog's). SparseSelfAttention slices DeepSpeed's master layout.
#include <doctest/doctest.h>

#include <set>

#include "fixture_util.h"
#include "tessera/nn/python_random.h"
#include "tessera/nn/sparse_self_attention.h"
#include "tessera/nn/sparsity_config.h"
#include "tessera/ops.h"
#include "tessera/rng.h"

using namespace tessera;
using nlohmann::json;

namespace {

const std::string kFixtures = TESSERA_SOURCE_ROOT "/tests/fixtures/deepspeed/";

std::vector<int64_t> ints(const json& j) {
  return j.get<std::vector<int64_t>>();
}

// The case's keys over the struct's defaults (the config section's), and the class defaults
// that differ from the section's where the case leaves the key out: BigBirdSparsityConfig
// draws 1 random block, LocalSlidingWindowSparsityConfig is unidirectional.
nn::SparsityConfig config_of(const std::string& mode, const json& keys) {
  nn::SparsityConfig c;
  c.mode = mode;
  if (mode == "bigbird") c.num_random_blocks = 1;
  if (mode == "local") c.attention = "unidirectional";
  for (const auto& [key, v] : keys.items()) {
    if (key == "block")
      c.block = v;
    else if (key == "different_layout_per_head")
      c.different_layout_per_head = v;
    else if (key == "num_local_blocks")
      c.num_local_blocks = v;
    else if (key == "num_global_blocks")
      c.num_global_blocks = v;
    else if (key == "attention")
      c.attention = v.get<std::string>();
    else if (key == "horizontal_global_attention")
      c.horizontal_global_attention = v;
    else if (key == "num_different_global_patterns")
      c.num_different_global_patterns = v;
    else if (key == "num_random_blocks")
      c.num_random_blocks = v;
    else if (key == "local_window_blocks")
      c.local_window_blocks = ints(v);
    else if (key == "global_block_indices")
      c.global_block_indices = ints(v);
    else if (key == "global_block_end_indices")
      c.global_block_end_indices = ints(v);
    else if (key == "num_sliding_window_blocks")
      c.num_sliding_window_blocks = v;
    else
      FAIL("the fixture has a key the test does not know: " << key);
  }
  return c;
}

}  // namespace

TEST_CASE("PythonRandom draws CPython's numbers: getrandbits and sample, both algorithms") {
  const json fixture = test::read_json(kFixtures + "python_random.json");
  REQUIRE(fixture["cases"].size() >= 6);
  for (const json& c : fixture["cases"]) {
    const uint64_t seed = c["seed"].get<uint64_t>();
    CAPTURE(seed);
    nn::PythonRandom random(seed);
    for (const json& bits : c["getrandbits32"])
      CHECK(random.getrandbits(32) == bits.get<uint32_t>());
    for (const json& s : c["samples"]) {
      const int64_t n = s["n"], k = s["k"];
      CAPTURE(n);
      CAPTURE(k);
      CHECK(random.sample(n, k) == ints(s["values"]));
    }
  }
}

TEST_CASE("sparsity layouts equal DeepSpeed's classes in every mode") {
  const json fixture = test::read_json(kFixtures + "sparsity_layouts.json");
  REQUIRE(fixture["cases"].size() >= 19);
  std::set<std::string> modes;
  for (const json& c : fixture["cases"]) {
    const std::string mode = c["mode"];
    modes.insert(mode);
    const std::string keys = c["keys"].dump();
    CAPTURE(mode);
    CAPTURE(keys);
    nn::PythonRandom random(c["seed"].get<uint64_t>());
    const Tensor got =
        nn::make_sparsity_layout(config_of(mode, c["keys"]), c["num_heads"], c["seq_len"], random);
    std::vector<int64_t> want;
    for (const json& head : c["layout"])
      for (const json& row : head)
        for (const json& x : row) want.push_back(x);
    const int64_t n = c["seq_len"].get<int64_t>() / config_of(mode, c["keys"]).block;
    CHECK(got.shape() == Shape{c["num_heads"].get<int64_t>(), n, n});
    CHECK(got.dtype() == DType::Int64);
    std::vector<int64_t> have;
    for (double x : got.to_vector()) have.push_back(static_cast<int64_t>(x));
    CHECK(have == want);
  }
  CHECK(modes == std::set<std::string>(nn::sparsity_modes().begin(), nn::sparsity_modes().end()));
}

TEST_CASE("sparsity configs: bad keys are errors naming the key") {
  nn::PythonRandom random(0);
  auto layout_error = [&](const nn::SparsityConfig& c, int64_t seq_len, const char* message) {
    CAPTURE(message);
    CHECK_THROWS_WITH_AS(nn::make_sparsity_layout(c, 2, seq_len, random),
                         doctest::Contains(message), Error);
  };
  nn::SparsityConfig c;
  layout_error(c, 100, "sparse_attention.block 16 does not divide the sequence length 100");
  c.mode = "sliding";
  layout_error(c, 64,
               "sparse_attention.mode is \"sliding\", expected one of dense, fixed, "
               "variable, bigbird, bslongformer, local");
  c = {};
  c.num_global_blocks = 3;
  layout_error(c, 64, "num_local_blocks 4 must be a positive multiple of num_global_blocks 3");
  c = {};
  c.num_different_global_patterns = 2;
  layout_error(c, 64, "num_different_global_patterns 2 needs different_layout_per_head true");
  c = {};
  c.attention = "causal";
  layout_error(c, 64, "sparse_attention.attention is \"causal\"");
  c.attention = "unidirectional";
  c.horizontal_global_attention = true;
  layout_error(c, 64, "horizontal_global_attention needs attention \"bidirectional\"");
  c = {};
  c.mode = "variable";
  c.global_block_indices = {0, -2};
  layout_error(c, 64, "sparse_attention.global_block_indices[1] is -2");
  c.global_block_indices = {0, 2};
  c.global_block_end_indices = std::vector<int64_t>{1};
  layout_error(c, 64, "global_block_end_indices has 1 entries but global_block_indices 2");
  c.global_block_end_indices = std::vector<int64_t>{1, 2};
  layout_error(c, 64, "global_block_end_indices[1] is 2, not after its start");
  c = {};
  c.mode = "variable";
  c.local_window_blocks = {};
  layout_error(c, 64, "sparse_attention.local_window_blocks is empty");
  c.local_window_blocks = {2, 0};
  layout_error(c, 64, "sparse_attention.local_window_blocks[1] is 0");
  c = {};
  c.mode = "bigbird";
  c.num_random_blocks = 5;
  layout_error(c, 64, "num_random_blocks 5 is more than the 4 blocks of a row");
  c.num_random_blocks = 2;
  c.attention = "unidirectional";
  layout_error(c, 64, "num_random_blocks 2 is more than the 1 blocks row 0 may attend to");
  c = {};
  c.mode = "bslongformer";
  c.num_sliding_window_blocks = 9;
  layout_error(c, 64, "num_sliding_window_blocks 9 is more than the 4 blocks of a row");
  c = {};
  c.block = 0;
  layout_error(c, 64, "sparse_attention.block is 0, expected >= 1");
}

TEST_CASE("block-sparse attention is scaled dot-product attention under the layout's mask") {
  // (Against PyTorch, every mask and random layouts: the op catalog's block_sparse_attention.)
  manual_seed(3);
  const Tensor q = randn({2, 3, 32, 8}, DType::Float64).requires_grad_();
  const Tensor k = randn({2, 3, 32, 8}, DType::Float64).requires_grad_();
  const Tensor v = randn({2, 3, 32, 5}, DType::Float64).requires_grad_();
  nn::SparsityConfig dense;
  dense.mode = "dense";
  dense.block = 8;
  nn::PythonRandom random(0);
  const Tensor layout = nn::make_sparsity_layout(dense, 3, 32, random);
  std::vector<double> keep(64, 1.0);
  keep[31] = keep[40] = 0.0;  // two padded keys
  const Tensor padding = ne(from_vector(keep, {2, 32}), zeros({2, 32}));
  auto grads = [&](const Tensor& out) {
    for (const Tensor& t : {q, k, v}) t.set_grad(Tensor());
    sum(out * out).backward();
    return std::vector<Tensor>{q.grad(), k.grad(), v.grad()};
  };
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const Tensor sparse = block_sparse_attention(q, k, v, layout, padding, causal);
    const Tensor want =
        scaled_dot_product_attention(q, k, v, padding.reshape({2, 1, 1, 32}), causal);
    CHECK(amax(abs(sparse - want)).item() < 1e-12);
    const std::vector<Tensor> g1 = grads(sparse), g2 = grads(want);
    for (size_t i = 0; i < 3; ++i) CHECK(amax(abs(g1[i] - g2[i])).item() < 1e-12);
  }
  // DeepSpeed's fixed layout (windows of 2 blocks, consecutive query blocks sharing their key
  // blocks): the dense attention under the layout's mask, element by element.
  nn::SparsityConfig fixed;
  fixed.block = 4;
  fixed.num_local_blocks = 2;
  const Tensor sparse_layout = nn::make_sparsity_layout(fixed, 3, 32, random);
  std::vector<double> allowed;
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t i = 0; i < 32; ++i)
      for (int64_t j = 0; j < 32; ++j)
        allowed.push_back(sparse_layout.select(0, h).select(0, i / 4).select(0, j / 4).item());
  const Tensor mask = ne(from_vector(allowed, {1, 3, 32, 32}), zeros({1, 3, 32, 32}));
  const Tensor sparse = block_sparse_attention(q, k, v, sparse_layout);
  const Tensor want = scaled_dot_product_attention(q, k, v, mask);
  CHECK(amax(abs(sparse - want)).item() < 1e-12);
  const std::vector<Tensor> g1 = grads(sparse), g2 = grads(want);
  for (size_t i = 0; i < 3; ++i) CHECK(amax(abs(g1[i] - g2[i])).item() < 1e-12);
  CHECK_THROWS_WITH_AS(
      block_sparse_attention(q, k, v, layout.narrow(0, 0, 2)),
      doctest::Contains("layout must be int64 [H, T / block, T / block] = [3, n, n]"), Error);
}

TEST_CASE("SparseSelfAttention: DeepSpeed's master layout, sliced for shorter sequences") {
  // The fixture's bigbird case drawn for 128 tokens after random.seed(3): a module of
  // max_seq_length 128 holds it, and 64 tokens take its top-left 4 x 4 blocks (DeepSpeed's
  // get_layout).
  const json fixture = test::read_json(kFixtures + "sparsity_layouts.json");
  const json* bigbird = nullptr;
  for (const json& c : fixture["cases"])
    if (c["mode"] == "bigbird" && c["keys"].empty()) bigbird = &c;
  REQUIRE(bigbird);
  REQUIRE((*bigbird)["seq_len"] == 128);
  nn::Module root;
  nn::SparseSelfAttention attn(&root, "attn", config_of("bigbird", json::object()), 2, 128, 3);
  const Tensor corner = attn.layout(64);
  CHECK(corner.shape() == Shape{2, 4, 4});
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 4; ++j)
        CHECK(corner.select(0, h).select(0, i).select(0, j).item() ==
              (*bigbird)["layout"][h][i][j].get<int64_t>());
  manual_seed(1);
  const Tensor q = randn({1, 2, 64, 8}), k = randn({1, 2, 64, 8}), v = randn({1, 2, 64, 8});
  CHECK(amax(abs(attn.forward(q, k, v) - block_sparse_attention(q, k, v, corner))).item() == 0.0);
  CHECK_THROWS_WITH_AS(
      attn.forward(randn({1, 2, 40, 8}), randn({1, 2, 40, 8}), randn({1, 2, 40, 8})),
      doctest::Contains("a sequence of 40 tokens; expected a multiple of "
                        "sparse_attention.block 16 up to max_seq_length 128"),
      Error);
  CHECK_THROWS_WITH_AS(attn.layout(144), doctest::Contains("up to max_seq_length 128"), Error);
  CHECK_THROWS_WITH_AS(attn.forward(randn({1, 3, 64, 8}), k, v),
                       doctest::Contains("SparseSelfAttention: q must be [B, 2, T, D]"), Error);
}
