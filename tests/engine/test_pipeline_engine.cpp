// PipelineModule + PipelineEngine (1F1B and ZB-H1) at 1, 2 and 4 stages reproduce one process: an
// MLP of 6 layers trained 3 batches of 4 micro-batches, and a model whose first and last layers are
// one tied module (its gradient summed over the two stages that hold it), against the same layers
// run as one module with the micro-batches' losses / 4 backwarded one after another; and 2 replicas
// of a pipeline of 1 or 2 stages, each on half of every micro-batch's rows. A client optimizer's
// pipeline checkpoint (a file pair per layer) resumes at the same stage count and in one process.
#include <doctest/doctest.h>

#include "pipe_test_layers.h"

#include <cmath>
#include <filesystem>

#include "relative_error.h"
#include "shared_temp_dir.h"
#include "tessera/engine/pipeline_engine.h"
#include "tessera/ops.h"
#include "tessera/parallel/pipe_schedule_registry.h"
#include "tessera/parallel/topology.h"
#include "tessera/rng.h"

// N-ranks-versus-one-process checks: also run at 2 and 4 ranks (tests/meson.build).
TEST_SUITE_BEGIN("ranks");

using namespace tessera;
using parallel::LayerSpec;
using parallel::PipeLayer;
using parallel::PipeValue;
using pipe_test::Dense;
using pipe_test::mse;
namespace fs = std::filesystem;

namespace {

// The input layer, `hidden` more, the output layer.
std::vector<LayerSpec> mlp(int hidden = 4) {
  std::vector<LayerSpec> specs{LayerSpec::of<Dense>("Dense", 4, 8)};
  for (int i = 0; i < hidden; ++i) specs.push_back(LayerSpec::of<Dense>("Dense", 8, 8));
  specs.push_back(LayerSpec::unary<nn::Linear>("Linear", 8, 4));
  return specs;
}

// The embedding-like layer at position 0 and, through its transposed weight, at the end.
std::vector<LayerSpec> tied() {
  auto head = [](PipeLayer& l, const PipeValue& x) -> PipeValue {
    return {matmul(x.at(0), dynamic_cast<Dense&>(l).fc.weight)};
  };
  return {LayerSpec::tied<Dense>("embed", {}, {}, "Dense", 4, 6),
          LayerSpec::of<Dense>("Dense", 6, 6), LayerSpec::of<Dense>("Dense", 6, 6),
          LayerSpec::tied<Dense>("embed", {}, head, "Dense", 4, 6)};
}

std::vector<engine::PipeMicroBatch> batches(int64_t count) {
  GeneratorState saved = default_generator().state();
  manual_seed(99);
  std::vector<engine::PipeMicroBatch> out;
  for (int64_t i = 0; i < count; ++i) out.push_back({{randn({3, 4})}, {randn({3, 4})}});
  default_generator().set_state(saved);
  return out;
}

std::unique_ptr<optim::Optimizer> sgd(nn::Module& m) {
  optim::ParamGroup g;
  for (auto& [name, t] : m.named_parameters()) g.names.push_back(name), g.params.push_back(*t);
  g.lr = 0.1;
  return std::make_unique<optim::SGD>(std::vector<optim::ParamGroup>{g}, optim::SGDOptions{0.9});
}

// One process's step on micro-batches [first, first + m): each loss / m backwarded in turn,
// then the optimizer; their mean loss.
double one_process_step(parallel::PipelineModule& whole, optim::Optimizer& opt,
                        const std::vector<engine::PipeMicroBatch>& data, int64_t first, int64_t m) {
  double mean = 0;
  for (int64_t k = first; k < first + m; ++k) {
    const auto& mb = data[static_cast<size_t>(k)];
    const Tensor loss = whole.loss(whole.forward(mb.inputs), mb.labels);
    mean += loss.item() / static_cast<double>(m);
    (loss * (1.0 / static_cast<double>(m))).backward();
  }
  opt.step();
  whole.zero_grad();
  return mean;
}

// The pipeline at this job's stage count against one process, step by step.
void check_against_one_process(const std::vector<LayerSpec>& specs, const char* what,
                               const std::string& schedule, int64_t chunks = 1) {
  auto world = parallel::world();
  const int p = world->size(), s = world->rank();
  const int64_t m = 4, steps = 3;
  parallel::PipelineModuleOptions o;
  o.num_stages = p;
  o.virtual_stages = chunks;
  o.partition_method = "uniform";
  o.seed_layers = true;
  o.base_seed = 5;
  parallel::PipelineModule piped(specs, mse, s, o);
  o.num_stages = 1;
  o.virtual_stages = 1;
  parallel::PipelineModule whole(specs, mse, 0, o);
  engine::PipelineEngine engine(piped, world, sgd(piped), {m, schedule});
  auto opt = sgd(whole);
  const auto data = batches(m * steps);
  for (int64_t step = 0; step < steps; ++step) {
    int64_t next = step * m;
    const double got = engine.train_batch([&] { return data[static_cast<size_t>(next++)]; });
    const double want = one_process_step(whole, *opt, data, step * m, m);
    CAPTURE(what);
    CAPTURE(schedule);
    CAPTURE(step);
    CHECK(std::abs(got - want) <= 1e-6 * std::abs(want));
  }
  // This stage's parameters after the steps: the whole model's of the same names.
  auto ref = whole.state_dict();
  for (auto& named : piped.named_parameters()) {
    const std::string name = named.first;  // (clang 14 cannot capture a binding)
    const Tensor* t = named.second;
    CAPTURE(name);
    REQUIRE(ref.count(name));
    CHECK(rel_diff(*t, ref.at(name)) <= 1e-6);
  }
  // Evaluation: the mean forward loss of 4 micro-batches.
  int64_t next = 0;
  const double eval = engine.eval_batch([&] { return data[static_cast<size_t>(next++)]; });
  double want = 0;
  for (int64_t k = 0; k < m; ++k)
    want += whole
                .loss(whole.forward(data[static_cast<size_t>(k)].inputs),
                      data[static_cast<size_t>(k)].labels)
                .item() /
            static_cast<double>(m);
  CHECK(std::abs(eval - want) <= 1e-6 * std::abs(want));
}

}  // namespace

TEST_CASE("pipeline engine (1F1B, ZB-H1): an MLP at this job's stage count equals one process") {
  if (parallel::world()->size() > 6) return;
  for (const char* schedule : {"1f1b", "zb-h1"}) check_against_one_process(mlp(), "mlp", schedule);
}

TEST_CASE("pipeline engine: a schedule registered by the program runs by its name") {
  if (parallel::world()->size() > 6) return;
  // ZB-H1's stream under a name of one's own: the engine takes it from the registry alone.
  if (!parallel::has_pipe_schedule("my-zb"))
    parallel::register_pipe_schedule(
        {"my-zb", "ZB-H1 again", 1, 1, 1, 1, false, parallel::find_pipe_schedule("zb-h1").build});
  check_against_one_process(mlp(), "mlp", "my-zb");
}

TEST_CASE("pipeline engine (interleaved): 2 chunks per stage equal one process") {
  const int p = parallel::world()->size();
  if (p < 2 || p > 4) return;
  // 2 p parts of one or two layers: the last stage's chunk 0 feeds the first stage's chunk 1.
  check_against_one_process(mlp(3 * p - 2), "mlp", "interleaved", 2);
  if (p == 2) check_against_one_process(tied(), "tied", "interleaved", 2);
}

TEST_CASE("pipeline engine: tied first and last layers equal one process") {
  if (parallel::world()->size() > 4) return;
  for (const char* schedule : {"1f1b", "zb-h1"})
    check_against_one_process(tied(), "tied", schedule);
}

namespace {
void check_side_by_side(const std::string& schedule) {
  auto world = parallel::world();
  const int n = world->size();
  const int pipes = n / 2, replicas = 2;  // np 2: 1 stage x 2 replicas; np 4: 2 x 2
  const parallel::ProcessTopology topo({"pipe", "data"}, {pipes, replicas});
  const auto me = topo.coords_of(world->rank());
  const int64_t m = 4;
  parallel::PipelineModuleOptions o;
  o.num_stages = pipes;
  o.partition_method = "uniform";
  o.seed_layers = true;
  parallel::PipelineModule piped(tied(), mse, me.at("pipe"), o);
  o.num_stages = 1;
  parallel::PipelineModule whole(tied(), mse, 0, o);
  engine::PipelineEngineOptions eo;
  eo.micro_batches = m;
  eo.schedule = schedule;
  eo.topology = topo;
  engine::PipelineEngine engine(piped, topo.group_for(*world, "pipe"), sgd(piped), eo);
  auto opt = sgd(whole);
  // Global micro-batches of 6 rows; replica d takes rows [3 d, 3 d + 3).
  GeneratorState saved = default_generator().state();
  manual_seed(123);
  std::vector<engine::PipeMicroBatch> global;
  for (int64_t k = 0; k < 2 * m; ++k) global.push_back({{randn({6, 4})}, {randn({6, 4})}});
  default_generator().set_state(saved);
  const int64_t d = me.at("data");
  // The iterator gives halved global inputs; DeepSpeed's batch_fn doubles them back and takes
  // this replica's rows (wrong losses if it were not applied), on the loading stages alone.
  int64_t batch_fn_calls = 0;
  engine.set_batch_fn([&](engine::PipeMicroBatch g) {
    ++batch_fn_calls;
    return engine::PipeMicroBatch{{(g.inputs[0] * 2.0).narrow(0, 3 * d, 3).contiguous()},
                                  {g.labels[0].narrow(0, 3 * d, 3).contiguous()}};
  });
  for (int64_t step = 0; step < 2; ++step) {
    int64_t next = step * m;
    const double got = engine.train_batch([&] {
      const auto& g = global[static_cast<size_t>(next++)];
      return engine::PipeMicroBatch{{g.inputs[0] * 0.5}, {g.labels[0]}};
    });
    const double want = one_process_step(whole, *opt, global, step * m, m);
    CAPTURE(schedule);
    CHECK(std::abs(got - want) <= 1e-6 * std::abs(want));
  }
  CHECK(batch_fn_calls == (engine.is_first_stage() || engine.is_last_stage() ? 2 * m : 0));
  auto ref = whole.state_dict();
  for (auto& named : piped.named_parameters()) {
    const std::string name = named.first;
    CAPTURE(name);
    CHECK(rel_diff(*named.second, ref.at(name)) <= 1e-6);
  }
}
}  // namespace

TEST_CASE("pipeline engine: pipelines side by side (pipe x data) equal one process") {
  const int n = parallel::world()->size();
  if (n != 2 && n != 4) return;
  for (const char* schedule : {"1f1b", "zb-h1"}) check_side_by_side(schedule);
}

TEST_CASE("pipeline engine: forward/backward/step point to train_batch; schedule errors") {
  auto world = parallel::world();
  parallel::PipelineModuleOptions o;
  o.num_stages = world->size();
  o.partition_method = "uniform";
  if (world->size() > 6) return;
  parallel::PipelineModule piped(mlp(), mse, world->rank(), o);
  engine::PipelineEngine engine(piped, world, sgd(piped), {2});
  CHECK_THROWS_WITH(engine.forward(), doctest::Contains("use train_batch()"));
  CHECK_THROWS_WITH(engine::PipelineEngine(piped, world, sgd(piped), {2, "gpipe"}),
                    doctest::Contains("pipeline schedule \"gpipe\" is not registered "
                                      "(registered: 1f1b, zb-h1, interleaved"));
  CHECK_THROWS_WITH(engine::PipelineEngine(piped, world, sgd(piped), {2, "interleaved"}),
                    doctest::Contains("interleaved schedule needs 2 or more stages of a "
                                      "PipelineModule of virtual_stages >= 2"));
  if (world->size() * 2 > 6) return;
  o.virtual_stages = 2;
  parallel::PipelineModule chunked(mlp(), mse, world->rank(), o);
  CHECK_THROWS_WITH(
      engine::PipelineEngine(chunked, world, sgd(chunked), {2, "1f1b"}),
      doctest::Contains("virtual_stages 2 (model chunks per stage) runs the interleaved schedule"));
}

TEST_CASE(
    "pipeline engine: a client optimizer's checkpoint, one file pair per layer, resumes "
    "at this stage count and in one process") {
  auto world = parallel::world();
  const int p = world->size(), s = world->rank();
  if (p > 6) return;
  const int64_t m = 4;
  parallel::PipelineModuleOptions o;
  o.num_stages = p;
  o.partition_method = "uniform";
  o.seed_layers = true;
  o.base_seed = 5;
  parallel::PipelineModule piped(mlp(), mse, s, o);
  engine::PipelineEngine pipe(piped, world, sgd(piped), {m, "1f1b"});
  const auto data = batches(2 * m);
  int64_t next = 0;
  auto feed = [&] { return data[static_cast<size_t>(next++)]; };
  pipe.train_batch(feed);
  const fs::path dir = test::shared_temp_dir("pipe-ckpt");
  pipe.stage_engine().save_checkpoint(dir.string(), "step1");
  if (p > 1) {  // (one stage keeps the module's own files)
    CHECK(fs::exists(dir / "step1" / "layer_00-model.safetensors"));
    CHECK(fs::exists(dir / "step1" / "layer_05-optimizer.safetensors"));
    CHECK_FALSE(fs::exists(dir / "step1" / "model.safetensors"));
  }
  // One process: the whole model (other initial weights) takes the stages' weights and
  // momentum; its next step is the pipeline's.
  o.num_stages = 1;
  o.base_seed = 6;
  parallel::PipelineModule whole(mlp(), mse, 0, o);
  auto config =
      io::TrainConfig::parse(R"({"train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0})", 1);
  engine::InitializeOptions init;
  init.optimizer = sgd(whole);
  init.group = parallel::make_local_group();
  engine::Engine one(whole, config, std::move(init));
  one.load_checkpoint(dir.string(), "step1");
  // The same stage count (other initial weights) resumes too.
  o.num_stages = p;
  o.base_seed = 7;
  parallel::PipelineModule resumed(mlp(), mse, s, o);
  engine::PipelineEngine again(resumed, world, sgd(resumed), {m, "1f1b"});
  again.stage_engine().load_checkpoint(dir.string(), "step1");
  const double want = pipe.train_batch(feed);
  next = m;
  CHECK(again.train_batch(feed) == want);  // (the same computation: bit for bit)
  const double got = one_process_step(whole, one.optimizer(), data, m, m);
  CHECK(std::abs(got - want) <= 1e-6 * std::abs(want));
  auto ref = whole.state_dict();
  for (auto& named : piped.named_parameters()) {
    const std::string name = named.first;
    CAPTURE(name);
    CHECK(rel_diff(*named.second, ref.at(name)) <= 1e-6);
  }
  world->barrier();
  if (s == 0) fs::remove_all(dir);
}

TEST_SUITE_END();
