// One model definition for every layout: GPT-2 and BERT built over a tensor-parallel group of
// one rank are the plain models bit for bit (the same initial draws, loss and gradients, the
// generator left at the same state, nothing split), and the parallel layers they are made of
// are plain Linear and Embedding layers there. (The N-ranks checks are in
// test_{gpt2,bert}_tensor_parallel.cpp.)
#include <doctest/doctest.h>

#include "tessera/models/bert.h"
#include "tessera/models/gpt2.h"
#include "tessera/parallel/process_group.h"
#include "tessera/parallel/tensor_parallel_layout.h"

using namespace tessera;

namespace {

// One loss and backward on each (the same dropout draws), then exact equality of the losses,
// every parameter and every gradient; nothing is split.
void check_same(models::PretrainedModel& plain, models::PretrainedModel& over_group,
                const models::Batch& batch) {
  manual_seed(9);
  const Tensor a = plain.loss(batch);
  manual_seed(9);
  const Tensor b = over_group.loss(batch);
  a.backward();
  b.backward();
  CHECK(a.to_vector() == b.to_vector());
  auto pa = plain.named_parameters(), pb = over_group.named_parameters();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::string& name = pa[i].first;  // (clang 14: CAPTURE's lambda)
    CAPTURE(name);
    REQUIRE(name == pb[i].first);
    CHECK(pa[i].second->to_vector() == pb[i].second->to_vector());
    CHECK(pa[i].second->grad().to_vector() == pb[i].second->grad().to_vector());
  }
  CHECK(parallel::tensor_parallel_layout(over_group).empty());
}

}  // namespace

TEST_CASE("GPT-2 over a one-rank tensor-parallel group is the plain model, bit for bit") {
  auto one = parallel::world();
  if (one->size() != 1) return;  // (a process of its own)
  models::GPT2Config c = models::GPT2Config::named("tiny");
  c.vocab_size = 97;
  models::Batch b;
  b.input_ids = from_vector(std::vector<int64_t>{1, 5, 9, 96, 3, 2, 7, 8}, {2, 4});
  b.targets = from_vector(std::vector<int64_t>{5, 9, 96, 3, 2, 7, 8, -100}, {2, 4});
  manual_seed(4);
  models::GPT2LMHeadModel plain(c);
  const double after_plain = rand({1}).item();
  manual_seed(4);
  models::GPT2LMHeadModel over_group(c, {one, /*sequence_parallel=*/true});
  CHECK(rand({1}).item() == after_plain);  // the same draws
  CHECK(over_group.transformer.h.at<models::GPT2Block>(0).attn.c_attn.type_name() == "Linear");
  CHECK(over_group.transformer.wte.type_name() == "Embedding");
  check_same(plain, over_group, b);
}

TEST_CASE("BERT over a one-rank tensor-parallel group is the plain model, bit for bit") {
  auto one = parallel::world();
  if (one->size() != 1) return;
  models::BertConfig c = models::BertConfig::named("tiny");
  models::Batch b;
  b.input_ids = from_vector(std::vector<int64_t>{1, 5, 9, 98, 3, 2, 7, 8}, {2, 4});
  b.targets = from_vector(std::vector<int64_t>{-100, 9, -100, 3, 2, -100, -100, 8}, {2, 4});
  b.next_sentence_label = from_vector(std::vector<int64_t>{0, 1}, {2});
  manual_seed(4);
  models::BertForPreTraining plain(c, true);
  const double after_plain = rand({1}).item();
  manual_seed(4);
  models::BertForPreTraining over_group(c, true, {one});
  CHECK(rand({1}).item() == after_plain);
  check_same(plain, over_group, b);
}
