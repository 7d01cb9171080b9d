// A Determined-style trial of a model of your own (PyTorchTrial in C++): the trial says how to
// build the model, optimizer and data and what one batch does; the harness trains it to
// searcher.max_length with validations, checkpoints, metrics and preemption.
//   c++ trial_mlp.cpp $(pkg-config --cflags --libs tessera) -o trial_mlp
//   ./trial_mlp trial_mlp.yaml                 # one slot
//   mpirun -np 2 ./trial_mlp trial_mlp.yaml    # with resources.slots_per_trial: 2
// Learns XOR-like labels of 2-D points. It shows a custom metric reducer (exact accuracy over
// every slot's predictions) and a callback (Determined's ReduceLROnPlateau example: the
// scheduler steps on every validation's loss). Stop it with Ctrl-C and run it again: it
// continues from its checkpoint.
#include <tessera/nn/layers.h>
#include <tessera/tessera.h>
#include <tessera/trial/run.h>

#include <cmath>
#include <vector>

namespace ts = tessera;
namespace trial = tessera::trial;

struct Point {
  double x0, x1;
  int64_t label;
};
struct Points {
  ts::Tensor x, y;                            // [n, 2] float32, [n] int64
  int64_t size() const { return x.size(0); }  // records in the batch (get_batch_length)
};

Points collate(std::vector<Point> items) {
  std::vector<double> x;
  std::vector<int64_t> y;
  for (const Point& p : items) x.insert(x.end(), {p.x0, p.x1}), y.push_back(p.label);
  const int64_t n = static_cast<int64_t>(items.size());
  return {ts::from_vector(x, {n, 2}), ts::from_vector(y, {n})};
}

// Point i of a dataset: a fixed function of (seed, i), so every slot and every rerun agrees.
std::shared_ptr<ts::io::Dataset<Point>> points(int64_t n, uint64_t seed) {
  return std::make_shared<ts::io::FunctionDataset<Point>>(n, [seed](int64_t i) {
    const double a = ts::philox_uniform_f64(seed, 2 * static_cast<uint64_t>(i)) * 2 - 1;
    const double b = ts::philox_uniform_f64(seed, 2 * static_cast<uint64_t>(i) + 1) * 2 - 1;
    return Point{a, b, (a > 0) == (b > 0) ? 1 : 0};
  });
}

struct MLP : ts::nn::Module {
  explicit MLP(int64_t hidden) : fc1(this, "fc1", 2, hidden), fc2(this, "fc2", hidden, 2) {}
  ts::nn::Linear fc1, fc2;
  ts::Tensor forward(const ts::Tensor& x) { return fc2(ts::relu(fc1(x))); }
};

// Accuracy over every validation record of every slot (not a mean of per-batch accuracies).
struct AccuracyReducer : trial::MetricReducer {
  int64_t correct = 0, total = 0;
  void update(int64_t c, int64_t t) { correct += c, total += t; }
  void reset() override { correct = total = 0; }
  nlohmann::json per_slot_reduce() override { return {correct, total}; }
  nlohmann::json cross_slot_reduce(const std::vector<nlohmann::json>& slots) override {
    double c = 0, t = 0;
    for (const auto& s : slots) c += s[0].get<double>(), t += s[1].get<double>();
    return t > 0 ? c / t : 0.0;
  }
};

// Determined's ReduceLROnPlateau example: the scheduler steps on each validation's loss.
struct PlateauCallback : trial::PyTorchCallback {
  explicit PlateauCallback(std::shared_ptr<trial::ReduceLROnPlateau> s) : scheduler(std::move(s)) {}
  void on_validation_end(const nlohmann::json& metrics) override {
    scheduler->step(metrics["validation_loss"].get<double>());
  }
  std::shared_ptr<trial::ReduceLROnPlateau> scheduler;
};

class MlpTrial : public trial::Trial<Points> {
 public:
  explicit MlpTrial(trial::TrialContext& c) : Trial(c) {
    model = c.wrap_model(std::make_shared<MLP>(c.get_hparam("hidden").get<int64_t>()));
    const double lr = c.get_hparam("lr");
    opt = c.wrap_optimizer(std::make_shared<ts::optim::SGD>(
        ts::optim::default_param_groups(model->named_parameters(), lr, 0.0),
        ts::optim::SGDOptions{.momentum = 0.9}));
    plateau = c.wrap_lr_scheduler(
        std::make_shared<trial::ReduceLROnPlateau>(
            *opt, trial::ReduceLROnPlateau::Options{.factor = 0.5, .patience = 1}),
        trial::StepMode::MANUAL_STEP);
    accuracy = c.wrap_reducer(std::make_shared<AccuracyReducer>(), "accuracy",
                              /*for_training=*/false);
  }

  trial::DataLoader<Points> build_training_data_loader() override {
    return {points(1024, 1),
            {.batch_size = context.get_per_slot_batch_size(), .shuffle = true},
            collate};
  }
  trial::DataLoader<Points> build_validation_data_loader() override {
    return {points(256, 2), {.batch_size = context.get_per_slot_batch_size()}, collate};
  }

  trial::BatchMetrics train_batch(const Points& b, int64_t, int64_t) override {
    const ts::Tensor loss = ts::cross_entropy(model->forward(b.x), b.y);
    context.backward(loss);
    context.step_optimizer(*opt);
    return {{"loss", loss}, {"lr", opt->lr()}};
  }

  trial::BatchMetrics evaluate_batch(const Points& b, int64_t) override {
    const ts::Tensor logits = model->forward(b.x);
    const ts::Tensor correct = ts::sum(ts::eq(ts::argmax(logits, 1), b.y).to(ts::DType::Float32));
    accuracy->update(static_cast<int64_t>(correct.item()), b.size());
    return {{"validation_loss", ts::cross_entropy(logits, b.y)}};
  }

  trial::Callbacks build_callbacks() override {
    return {{"plateau", std::make_shared<PlateauCallback>(plateau)}};
  }

 private:
  std::shared_ptr<MLP> model;
  std::shared_ptr<ts::optim::SGD> opt;
  std::shared_ptr<trial::ReduceLROnPlateau> plateau;
  std::shared_ptr<AccuracyReducer> accuracy;
};

int main(int argc, char** argv) {
  return trial::run<MlpTrial>(argc, argv);
}
