// DeepSpeed's transformer kernel layer (nn/deepspeed_transformer_layer.h) against independent
// references: Post-LN against Hugging Face transformers' own BertLayer, Pre-LN against the
// layer DeepSpeed's kernel computes written out in PyTorch (fixture:
// tests/fixtures/generate_transformer_layer_fixtures.py), forward and every gradient, float32
// to 1e-5. DeepSpeedTransformerConfig: DeepSpeed's defaults, its keys from JSON, errors naming
// the field; the static layer counter; DeepSpeed's initialisation; the memory options (the bytes
// each saves, derived by hand, and the results they keep).
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "relative_error.h"
#include "tessera/io/safetensors.h"
#include "tessera/nn/deepspeed_transformer_layer.h"
#include "tessera/ops.h"
#include "tessera/rng.h"
#include "tessera/storage.h"

using namespace tessera;
using nn::DeepSpeedTransformerConfig;
using nn::DeepSpeedTransformerLayer;

namespace {

const std::string kFixture =
    TESSERA_SOURCE_ROOT "/tests/fixtures/deepspeed/transformer_layer.safetensors";
const char* kParams[] = {"attn_qkvw", "attn_qkvb", "attn_ow",  "attn_ob",  "attn_nw", "attn_nb",
                         "inter_w",   "inter_b",   "output_w", "output_b", "norm_w",  "norm_b"};

DeepSpeedTransformerConfig fixture_config(bool pre_layer_norm) {
  DeepSpeedTransformerConfig c;
  c.batch_size = 2;
  c.max_seq_length = 8;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.heads = 4;
  c.attn_dropout_ratio = 0.0;
  c.hidden_dropout_ratio = 0.0;
  c.num_hidden_layers = 2;
  c.initializer_range = 0.02;
  c.pre_layer_norm = pre_layer_norm;
  return c;
}

// The layer's output and gradients for loss = sum(out * r) against the fixture's.
void check_against_fixture(const std::string& form, const Tensor& mask) {
  auto f = io::load_safetensors(kFixture);
  nn::Module root;
  DeepSpeedTransformerLayer layer(&root, "layer", fixture_config(form == "pre"));
  std::map<std::string, Tensor> state;
  for (const char* n : kParams) state["layer." + std::string(n)] = f.at(n);
  root.load_state_dict(state);
  Tensor x = f.at("x").clone().requires_grad_();
  const Tensor out = layer.forward(x, mask);
  CHECK(rel_diff(out, f.at(form + ".out")) < 1e-5);
  sum(out * f.at("r")).backward();
  CHECK(rel_diff(x.grad(), f.at(form + ".grad.x")) < 1e-5);
  for (auto& [name, p] : root.named_parameters()) {
    const std::string key = name.substr(name.find('.') + 1);
    CAPTURE(key);
    CHECK(rel_diff(p->grad(), f.at(form + ".grad." + key)) < 1e-5);
  }
}

}  // namespace

TEST_CASE("DeepSpeedTransformerLayer, Post-LN: HF's BertLayer (gelu_new), output and gradients") {
  const auto f = io::load_safetensors(kFixture);
  check_against_fixture("post", f.at("mask"));
}

TEST_CASE(
    "DeepSpeedTransformerLayer, Pre-LN: DeepSpeed's kernel in PyTorch, output and gradients") {
  const auto f = io::load_safetensors(kFixture);
  check_against_fixture("pre", f.at("mask"));
  // A bool mask (true = attend) takes the fused attention: the same result.
  const Tensor keep = ge(f.at("mask"), zeros({}));
  check_against_fixture("pre", keep);
}

TEST_CASE("DeepSpeedTransformerLayer: initial_weights / initial_biases as DeepSpeed's tests") {
  const auto f = io::load_safetensors(kFixture);
  const int64_t C = 32;
  const std::vector<Tensor> qkv = split(f.at("attn_qkvw"), C, 0);
  const std::vector<Tensor> w = {qkv[0],           qkv[1],          qkv[2],
                                 f.at("attn_ow"),  f.at("attn_nw"), f.at("inter_w"),
                                 f.at("output_w"), f.at("norm_w")};
  const std::vector<Tensor> b = {Tensor(),         Tensor(),        Tensor(),
                                 f.at("attn_ob"),  f.at("attn_nb"), f.at("inter_b"),
                                 f.at("output_b"), f.at("norm_b")};
  nn::Module root;
  DeepSpeedTransformerLayer layer(&root, "layer", fixture_config(true), w, b);
  CHECK(rel_diff(layer.attn_qkvw, f.at("attn_qkvw")) == 0);
  CHECK(sum(abs(layer.attn_qkvb)).item() == 0);  // DeepSpeed zeroes it
  CHECK(rel_diff(layer.norm_b, f.at("norm_b")) == 0);
  std::vector<Tensor> short_list(w.begin(), w.begin() + 7);
  CHECK_THROWS_WITH_AS(DeepSpeedTransformerLayer(&root, "bad", fixture_config(true), short_list, b),
                       doctest::Contains("8 tensors each"), Error);
  std::vector<Tensor> wrong = w;
  wrong[5] = zeros({32, 32});
  CHECK_THROWS_WITH_AS(DeepSpeedTransformerLayer(&root, "bad2", fixture_config(true), wrong, b),
                       doctest::Contains("initial_weights[5] (intermediate) must be"), Error);
}

TEST_CASE("DeepSpeedTransformerLayer: layer_id counts layers in creation order") {
  DeepSpeedTransformerLayer::reset_layer_id();
  nn::Module root;
  DeepSpeedTransformerLayer a(&root, "a", fixture_config(true));
  DeepSpeedTransformerLayer b(&root, "b", fixture_config(false));
  CHECK(a.config().layer_id == 0);
  CHECK(b.config().layer_id == 1);
  CHECK(DeepSpeedTransformerLayer::next_layer_id() == 2);
}

TEST_CASE("DeepSpeedTransformerLayer: DeepSpeed's initialisation (adjust_init_range)") {
  DeepSpeedTransformerConfig c = fixture_config(true);
  c.hidden_size = 256;
  c.intermediate_size = -1;  // 4 x hidden_size
  c.num_hidden_layers = 8;
  manual_seed(3);
  nn::Module root;
  DeepSpeedTransformerLayer layer(&root, "layer", c);
  CHECK(layer.inter_w.shape() == Shape{1024, 256});
  const auto std_of = [](const Tensor& t) { return std::sqrt(mean(t * t).item()); };
  // 65536 to 262144 draws: the sample std is within 1% of the true one.
  CHECK(std_of(layer.attn_qkvw) == doctest::Approx(0.02).epsilon(0.01));
  CHECK(std_of(layer.inter_w) == doctest::Approx(0.02).epsilon(0.01));
  const double adjusted = 0.02 / std::sqrt(2.0 * 8);
  CHECK(std_of(layer.attn_ow) == doctest::Approx(adjusted).epsilon(0.01));
  CHECK(std_of(layer.output_w) == doctest::Approx(adjusted).epsilon(0.01));
  CHECK(sum(abs(layer.attn_qkvb)).item() == 0);
  CHECK(sum(abs(layer.output_b)).item() == 0);
  CHECK(amin(layer.attn_nw).item() == 1.0);
  CHECK(amax(layer.attn_nw).item() == 1.0);
  c.adjust_init_range = false;
  DeepSpeedTransformerLayer plain(&root, "plain", c);
  CHECK(std_of(plain.output_w) == doctest::Approx(0.02).epsilon(0.01));
}

TEST_CASE("DeepSpeedTransformerConfig: DeepSpeed's defaults, its keys, errors naming the field") {
  DeepSpeedTransformerConfig c;
  c.hidden_size = 64;
  c.heads = 4;
  c.num_hidden_layers = 2;
  const DeepSpeedTransformerConfig filled = c.checked();
  CHECK(filled.intermediate_size == 256);
  CHECK(filled.attn_dropout_ratio == 0);
  CHECK(filled.initializer_range == 0.02);
  CHECK(filled.layer_norm_eps == 1e-12);
  CHECK(filled.pre_layer_norm);
  CHECK(filled.adjust_init_range);
  CHECK(filled.dtype() == DType::Float32);

  const auto j = nlohmann::json::parse(R"({"hidden_size": 64, "heads": 4, "num_hidden_layers": 2,
      "pre_layer_norm": false, "bf16": true, "attn_dropout_ratio": 0.1, "huggingface": true})");
  const DeepSpeedTransformerConfig read = DeepSpeedTransformerConfig::from_json(j);
  CHECK(!read.pre_layer_norm);
  CHECK(read.dtype() == DType::BFloat16);
  CHECK(read.attn_dropout_ratio == 0.1);
  CHECK(DeepSpeedTransformerConfig::keys().size() == 24);

  const auto fails = [](const std::string& text, const std::string& message) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(
        DeepSpeedTransformerConfig::from_json(nlohmann::json::parse(text)).checked(),
        doctest::Contains(message.c_str()), Error);
  };
  fails(R"({"hidden_size": 64, "heads": 5, "num_hidden_layers": 1})",
        "DeepSpeedTransformerConfig.heads 5 does not divide hidden_size 64");
  fails(R"({"hidden_size": 64, "heads": 4, "num_hidden_layers": 1, "head": 4})",
        "unknown key 'head'");
  fails(R"({"hidden_size": "64"})", "DeepSpeedTransformerConfig.hidden_size must be an integer");
  fails(R"({"heads": 4, "num_hidden_layers": 1})", "hidden_size must be set");
  fails(R"({"hidden_size": 64, "heads": 4})", "set num_hidden_layers");
  fails(R"({"hidden_size": 64, "heads": 4, "num_hidden_layers": 1, "attn_dropout_ratio": 1.5})",
        "DeepSpeedTransformerConfig.attn_dropout_ratio must be in [0, 1)");
  fails(R"({"hidden_size": 64, "heads": 4, "num_hidden_layers": 1, "fp16": true, "bf16": true})",
        "fp16 and bf16 are both set");
  fails(R"([1, 2])", "expected a JSON object");
}

TEST_CASE("DeepSpeedTransformerLayer: inputs it cannot take are errors naming the limit") {
  nn::Module root;
  DeepSpeedTransformerLayer layer(&root, "layer", fixture_config(true));
  CHECK_THROWS_WITH_AS(layer.forward(zeros({3, 8, 32})), doctest::Contains("batch_size 2"), Error);
  CHECK_THROWS_WITH_AS(layer.forward(zeros({2, 9, 32})), doctest::Contains("max_seq_length 8"),
                       Error);
  CHECK_THROWS_WITH_AS(layer.forward(zeros({2, 8, 16})), doctest::Contains("hidden_size 32"),
                       Error);
}

TEST_CASE("DeepSpeedTransformerLayer: dropout from its own seeded stream, none in eval") {
  DeepSpeedTransformerConfig c = fixture_config(true);
  c.attn_dropout_ratio = 0.1;
  c.hidden_dropout_ratio = 0.1;
  c.seed = 11;
  const Tensor x = randn({2, 8, 32});
  const auto first_output = [&](int64_t layer_id) {
    DeepSpeedTransformerLayer::reset_layer_id(layer_id);
    manual_seed(1);  // the same weights
    nn::Module root;
    DeepSpeedTransformerLayer layer(&root, "layer", c);
    manual_seed(99);  // the default generator plays no part in its masks
    const Tensor train = layer.forward(x);
    layer.eval();
    return std::pair{train, layer.forward(x) - layer.forward(x)};
  };
  const auto [a, eval_a] = first_output(0);
  const auto [b, eval_b] = first_output(0);
  const auto [other, eval_other] = first_output(1);  // seed + layer_id: another stream
  CHECK(rel_diff(a, b) == 0);
  CHECK(rel_diff(a, other) > 1e-3);
  // The largest seed: seed + layer_id wraps (UBSan would stop a signed overflow).
  c.seed = std::numeric_limits<int64_t>::max();
  nn::Module root;
  DeepSpeedTransformerLayer last(&root, "last", c);
  CHECK(last.forward(x).shape() == x.shape());
  CHECK(sum(abs(eval_a)).item() == 0);
}

namespace {

struct Run {
  Tensor out, dx;
  std::map<std::string, Tensor> grads;
  int64_t kept_bytes = 0;  // allocated by forward and alive after it, output included
};

// One training forward and backward of a fresh layer: weights from manual_seed(1), dropout
// masks from manual_seed(5), loss = sum(out * r).
Run train_once(const DeepSpeedTransformerConfig& c) {
  manual_seed(1);
  nn::Module root;
  DeepSpeedTransformerLayer layer(&root, "layer", c);
  const Tensor r = randn({2, 8, 32});
  Tensor x = randn({2, 8, 32}).requires_grad_();
  Tensor mask = zeros({2, 1, 1, 8});
  mask.narrow(3, 5, 3).select(0, 1).fill_(-10000.0);
  manual_seed(5);
  Allocator& memory = allocator_for(DeviceType::CPU);
  const int64_t before = memory.stats().allocated;
  Run run;
  run.out = layer.forward(x, mask);
  run.kept_bytes = memory.stats().allocated - before;
  sum(run.out * r).backward();
  run.dx = x.grad();
  for (auto& [name, p] : root.named_parameters()) run.grads[name] = p->grad();
  return run;
}

}  // namespace

TEST_CASE("DeepSpeedTransformerLayer: the memory options keep what DeepSpeed says, same results") {
  // B = 2, T = 8, C = 32, I = 64, 4 heads, float32: N = B T = 16 rows.
  const int64_t N = 16, C = 32, I = 64, BHTT = 2 * 4 * 8 * 8;
  for (const bool pre : {true, false}) {
    CAPTURE(pre);
    DeepSpeedTransformerConfig c = fixture_config(pre);
    c.attn_dropout_ratio = 0.2;
    c.hidden_dropout_ratio = 0.1;
    const Run plain = train_once(c);
    struct Option {
      std::string name;
      bool DeepSpeedTransformerConfig::*flag;
      int64_t saved;  // bytes
      bool same_bits;
    };
    // gelu_checkpoint: the GELU output [N, I]; attn_dropout_checkpoint: the dropped-out
    // probabilities [B, H, T, T]; normalize_invertible: the LayerNorm inputs the layer makes
    // (Post-LN both, x + attention and h + ffn; Pre-LN h only: its input x is the caller's).
    for (const Option& o :
         {Option{"gelu_checkpoint", &DeepSpeedTransformerConfig::gelu_checkpoint, N * I * 4, true},
          Option{"attn_dropout_checkpoint", &DeepSpeedTransformerConfig::attn_dropout_checkpoint,
                 BHTT * 4, true},
          Option{"normalize_invertible", &DeepSpeedTransformerConfig::normalize_invertible,
                 (pre ? 1 : 2) * N * C * 4, false}}) {
      CAPTURE(o.name);
      DeepSpeedTransformerConfig with = c;
      with.*o.flag = true;
      const Run run = train_once(with);
      CHECK(plain.kept_bytes - run.kept_bytes == o.saved);
      const double tolerance = o.same_bits ? 0.0 : 1e-5;
      CHECK(rel_diff(run.out, plain.out) <= tolerance);
      CHECK(rel_diff(run.dx, plain.dx) <= tolerance);
      for (const auto& entry : plain.grads) {
        const std::string& name = entry.first;
        CAPTURE(name);
        CHECK(rel_diff(run.grads.at(name), entry.second) <= tolerance);
      }
    }
  }
}

TEST_CASE("DeepSpeedTransformerLayer: data-parallel ranks reproduce one process, dropout on") {
  // Each of 2 ranks (its data-parallel shard set in turn, in this process) takes half the batch:
  // its outputs are one process's rows and its weight gradients sum to one process's, with
  // attention and hidden dropout on, through the fused attention (bool mask) and through
  // explicit probabilities (additive mask, attn_dropout_checkpoint).
  DeepSpeedTransformerConfig c = fixture_config(false);
  c.attn_dropout_ratio = 0.2;
  c.hidden_dropout_ratio = 0.1;
  c.batch_size = 4;
  c.seed = 3;
  c.attn_dropout_checkpoint = true;
  manual_seed(2);
  const Tensor x = randn({4, 8, 32}), r = randn({4, 8, 32});
  std::vector<double> keep(4 * 8, 1.0);
  keep[8 + 7] = keep[3 * 8 + 6] = 0;
  const Tensor bool_mask = from_vector(keep, {4, 1, 1, 8}).to(DType::Bool);
  const Tensor additive = (from_vector(keep, {4, 1, 1, 8}) - 1.0) * 10000.0;
  for (const Tensor& mask : {bool_mask, additive}) {
    CAPTURE(mask.dtype());
    const auto run = [&](int rank, int world) {
      set_data_parallel_shard(rank, world);
      DeepSpeedTransformerLayer::reset_layer_id(0);
      manual_seed(1);  // the same weights
      nn::Module root;
      DeepSpeedTransformerLayer layer(&root, "layer", c);
      const int64_t rows = 4 / world;
      const Tensor out =
          layer.forward(x.narrow(0, rank * rows, rows), mask.narrow(0, rank * rows, rows));
      sum(out * r.narrow(0, rank * rows, rows)).backward();
      std::map<std::string, Tensor> grads;
      for (auto& [name, p] : root.named_parameters()) grads[name] = p->grad();
      set_data_parallel_shard(0, 1);
      return std::pair{out, grads};
    };
    const auto [whole, whole_grads] = run(0, 1);
    const auto [first, first_grads] = run(0, 2);
    const auto [second, second_grads] = run(1, 2);
    CHECK(rel_diff(first, whole.narrow(0, 0, 2)) < 1e-6);
    CHECK(rel_diff(second, whole.narrow(0, 2, 2)) < 1e-6);
    for (const auto& entry : whole_grads) {
      const std::string& name = entry.first;
      CAPTURE(name);
      CHECK(rel_diff(first_grads.at(name) + second_grads.at(name), entry.second) < 1e-6);
    }
  }
}
