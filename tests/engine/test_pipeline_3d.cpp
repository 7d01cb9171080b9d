// 3D through the C++ API (np 4: 2 stages x 2 tensor-parallel ranks, the {"pipe", "data",
// "model"} topology): GPT-2's tensor-parallel pipeline layers (vocabulary-parallel embedding and
// tied head, column/row-parallel blocks, dropout 0.1, a vocabulary that pads) trained 2 batches
// of 4 micro-batches with SGD under 1F1B, ZB-H1 and the interleaved schedule (and with sequence
// parallelism, 1F1B and ZB-H1) reproduce one process running the whole (unsplit) GPT-2 layers:
// every loss, and every parameter shard against the same shard of one process's parameter, to
// 1e-6.
#include <doctest/doctest.h>

#include <cmath>

#include "relative_error.h"
#include "tessera/engine/pipeline_engine.h"
#include "tessera/models/gpt2_pipeline.h"
#include "tessera/ops.h"
#include "tessera/optim/optimizer.h"
#include "tessera/parallel/tensor_parallel_layout.h"
#include "tessera/parallel/topology.h"
#include "tessera/rng.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;

namespace {

std::unique_ptr<optim::Optimizer> sgd_3d(nn::Module& m) {
  optim::ParamGroup g;
  for (auto& [name, t] : m.named_parameters()) g.names.push_back(name), g.params.push_back(*t);
  g.lr = 0.05;
  return std::make_unique<optim::SGD>(std::vector<optim::ParamGroup>{g}, optim::SGDOptions{0.9});
}

models::GPT2Config tiny() {
  models::GPT2Config c = models::GPT2Config::named("tiny");  // 4 heads, C 32
  c.n_layer = 3;
  c.vocab_size = 97;  // pads to 98 over 2 ranks
  c.n_positions = 16;
  c.dropout = 0.1;
  return c;
}

std::vector<engine::PipeMicroBatch> token_batches(int64_t count, int64_t vocab) {
  std::vector<engine::PipeMicroBatch> out;
  for (int64_t k = 0; k < count; ++k) {
    std::vector<int64_t> ids, targets;
    for (int64_t i = 0; i < 2 * 16; ++i)
      ids.push_back((i * 37 + 11 * k + 3) % vocab), targets.push_back((i * 53 + 7 * k + 5) % vocab);
    out.push_back({{from_vector(ids, {2, 16})}, {from_vector(targets, {2, 16})}});
  }
  return out;
}

void check_3d(const std::string& schedule, bool sequence_parallel) {
  auto world = parallel::world();
  const parallel::ProcessTopology topo({"pipe", "data", "model"}, {2, 1, 2});
  const auto me = topo.coords_of(world->rank());
  auto pipe = topo.group_for(*world, "pipe");
  auto tp = topo.group_for(*world, "model");
  const models::GPT2Config c = tiny();
  const int64_t m = 4, chunks = schedule == "interleaved" ? 2 : 1;
  set_data_parallel_shard(0, 1);
  // One process: the whole GPT-2 layers in one stage, GPT2LMHeadModel's initialisation.
  manual_seed(11);
  models::GPT2LMHeadModel reference(c);
  parallel::PipelineModule whole(models::gpt2_pipeline_layers(c), models::gpt2_pipeline_loss(), 0);
  auto names = [n = c.n_layer](const std::string& name) {
    return models::gpt2_name_of_pipeline_parameter(name, n);
  };
  whole.set_saved_names(names);
  whole.load_saved_state(reference.state_dict());
  parallel::PipelineModuleOptions o;
  o.num_stages = 2;
  o.virtual_stages = chunks;
  o.partition_method = "uniform";
  parallel::PipelineModule piped(models::gpt2_pipeline_layers(c, tp, sequence_parallel),
                                 models::gpt2_pipeline_loss(tp), topo, o);  // (stage: the rank's)
  REQUIRE(piped.stage_id() == me.at("pipe"));
  piped.set_saved_names(names);
  piped.load_saved_state(reference.state_dict(), tp->rank(), tp->size());
  engine::PipelineEngineOptions eo;
  eo.micro_batches = m;
  eo.schedule = schedule;
  eo.topology = topo;
  eo.tensor_parallel_group = tp;
  engine::PipelineEngine engine(piped, pipe, sgd_3d(piped), eo);
  auto opt = sgd_3d(whole);
  const auto data = token_batches(2 * m, c.vocab_size);
  manual_seed(21);
  for (int64_t step = 0; step < 2; ++step) {
    const GeneratorState start = default_generator().state();
    int64_t next = step * m;
    const double got = engine.train_batch([&] { return data[static_cast<size_t>(next++)]; });
    const GeneratorState after = default_generator().state();
    default_generator().set_state(start);  // one process draws the same dropout masks
    double want = 0;
    for (int64_t k = step * m; k < (step + 1) * m; ++k) {
      const auto& mb = data[static_cast<size_t>(k)];
      const Tensor loss = whole.loss(whole.forward(mb.inputs), mb.labels);
      want += loss.item() / static_cast<double>(m);
      (loss * (1.0 / static_cast<double>(m))).backward();
    }
    opt->step();
    whole.zero_grad();
    CAPTURE(schedule);
    CAPTURE(sequence_parallel);
    CAPTURE(step);
    CHECK(std::abs(got - want) <= 1e-6 * std::abs(want));
    CHECK(default_generator().state().offset == after.offset);  // where one process leaves it
  }
  // Every shard against the same shard of one process's parameter.
  const auto ref = whole.state_dict();
  const parallel::TensorParallelLayout layout = parallel::tensor_parallel_layout(piped);
  int64_t sharded = 0;
  for (auto& named : piped.named_parameters()) {
    const std::string name = named.first;
    CAPTURE(name);
    REQUIRE(ref.count(name));
    auto split = layout.find(name);
    sharded += split != layout.end();
    const Tensor want =
        split == layout.end()
            ? ref.at(name)
            : parallel::shard_of_whole(ref.at(name), split->second, tp->rank(), tp->size());
    CHECK(rel_diff(*named.second, want) <= 1e-6);
  }
  CHECK(sharded > 0);
}

}  // namespace

TEST_CASE(
    "pipeline engine 3D: GPT-2 at 2 stages x 2 tensor-parallel ranks (+ sequence parallel) equals "
    "one process") {
  if (parallel::world()->size() != 4) return;
  for (const char* schedule : {"1f1b", "zb-h1", "interleaved"}) check_3d(schedule, false);
  for (const char* schedule : {"1f1b", "zb-h1"}) check_3d(schedule, true);
}

TEST_CASE("pipeline engine 3D: the topology's model axis must match the tensor-parallel group") {
  auto world = parallel::world();
  if (world->size() != 4) return;
  const parallel::ProcessTopology topo({"pipe", "data", "model"}, {2, 1, 2});
  auto pipe = topo.group_for(*world, "pipe");
  auto tp = topo.group_for(*world, "model");
  const models::GPT2Config c = tiny();
  parallel::PipelineModuleOptions o;
  o.num_stages = 2;
  parallel::PipelineModule piped(models::gpt2_pipeline_layers(c, tp),
                                 models::gpt2_pipeline_loss(tp),
                                 topo.coords_of(world->rank()).at("pipe"), o);
  o.num_stages = 4;
  CHECK_THROWS_WITH(parallel::PipelineModule(models::gpt2_pipeline_layers(c, tp),
                                             models::gpt2_pipeline_loss(tp), topo, o),
                    doctest::Contains("num_stages 4 but the topology's \"pipe\" axis has 2"));
  engine::PipelineEngineOptions eo;
  eo.micro_batches = 2;
  eo.topology = topo;  // (no tensor_parallel_group)
  CHECK_THROWS_WITH(engine::PipelineEngine(piped, pipe, sgd_3d(piped), eo),
                    doctest::Contains("the topology's \"model\" axis has 2 ranks but the "
                                      "tensor-parallel group"));
}

TEST_SUITE_END();
