// The TPE searcher: its Parzen estimators against hand-computed mixtures, its random start,
// that it finds a better optimum than random search on a known objective, snapshot/restore.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "tessera/experiment/parzen_estimator.h"
#include "tessera/experiment/search_method.h"

using namespace tessera;
using namespace tessera::experiment;

namespace {

trial::ExperimentConfig config(const std::string& searcher, int64_t trials) {
  return trial::ExperimentConfig::parse(
      "hyperparameters:\n"
      "  lr: {type: log, minval: -4, maxval: -1}\n"
      "  layers: {type: int, minval: 1, maxval: 8}\n"
      "  act: {type: categorical, vals: [relu, gelu, tanh]}\n"
      "  fixed: 7\n"
      "searcher:\n  name: " +
          searcher + "\n  metric: loss\n  max_trials: " + std::to_string(trials) +
          "\n  max_concurrent_trials: 1\n  max_length: {batches: 10}\n",
      "exp.yaml");
}

// Best at lr = 10^-2.5, layers 5, gelu.
double objective(const nlohmann::json& h) {
  const double x = std::log10(h["lr"].get<double>()) + 2.5;
  const double layers = static_cast<double>(h["layers"].get<int64_t>()) - 5.0;
  return x * x + 0.05 * layers * layers + (h["act"] == "gelu" ? 0.0 : 0.3);
}

// Runs `trials` trials one after another; their hyperparameters in order.
std::vector<nlohmann::json> run(SearchMethod& s, int64_t trials) {
  std::vector<Action> queue = s.initial_trials();
  std::vector<nlohmann::json> out;
  while (!queue.empty() && static_cast<int64_t>(out.size()) < trials) {
    const Action a = queue.front();
    queue.erase(queue.begin());
    out.push_back(a.hparams);
    s.trial_created(a.request_id);
    s.validation_completed(a.request_id, 10, objective(a.hparams));
    for (const Action& b : s.trial_exited(a.request_id)) queue.push_back(b);
  }
  return out;
}

double gaussian_mass(double mu, double s, double lo, double hi) {
  return 0.5 *
         (std::erf((hi - mu) / (s * std::sqrt(2.0))) - std::erf((lo - mu) / (s * std::sqrt(2.0))));
}

}  // namespace

TEST_CASE("Parzen estimator: widths, magic clip, prior, density by hand") {
  // Observations 2 and 4 on [0, 10]: widths max(2 - 0, 4 - 2) = 2 and max(4 - 2, 10 - 4) = 6,
  // the prior at 5 of width 10; 3 kernels clip widths to >= 10 / 4 = 2.5.
  const ParzenEstimator p({4.0, 2.0}, 0.0, 10.0, 1.0);
  CHECK(p.mus() == std::vector<double>{2.0, 4.0, 5.0});
  CHECK(p.sigmas() == std::vector<double>{2.5, 6.0, 10.0});
  for (double w : p.weights()) CHECK(w == doctest::Approx(1.0 / 3.0));
  double want = 0.0;
  const double mus[] = {2.0, 4.0, 5.0}, sigmas[] = {2.5, 6.0, 10.0};
  for (int i = 0; i < 3; ++i) {
    const double z = (3.0 - mus[i]) / sigmas[i];
    want += std::exp(-0.5 * z * z) / (sigmas[i] * std::sqrt(2.0 * M_PI)) /
            gaussian_mass(mus[i], sigmas[i], 0.0, 10.0) / 3.0;
  }
  CHECK(p.log_pdf(3.0) == doctest::Approx(std::log(want)).epsilon(1e-12));
  // Its samples stay in the range.
  SearchRandom r(5);
  for (int i = 0; i < 200; ++i) {
    const double x = p.sample(r);
    CHECK((x >= 0.0 && x <= 10.0));
  }
  // The prior weight counts as a weight: 2 against 1 + 1.
  const ParzenEstimator q({2.0, 4.0}, 0.0, 10.0, 2.0);
  CHECK(q.weights().back() == doctest::Approx(0.5));
}

TEST_CASE("categorical estimator: counts plus the prior spread over the choices") {
  const CategoricalEstimator c({0, 0, 2}, 3, 1.0);
  CHECK(c.weights()[0] == doctest::Approx(7.0 / 12.0));
  CHECK(c.weights()[1] == doctest::Approx(1.0 / 12.0));
  CHECK(c.weights()[2] == doctest::Approx(4.0 / 12.0));
}

TEST_CASE("TPE: the startup trials are random search's samples") {
  auto tpe = make_search_method(config("tpe", 30));
  auto random = make_search_method(config("random", 30));
  const auto a = run(*tpe, 10), b = run(*random, 10);
  CHECK(a == b);
}

TEST_CASE("TPE: closer to the optimum than random search with the same budget") {
  auto tpe = make_search_method(config("tpe", 60));
  auto random = make_search_method(config("random", 60));
  auto best = [](const std::vector<nlohmann::json>& hs) {
    double b = INFINITY;
    for (const auto& h : hs) b = std::min(b, objective(h));
    return b;
  };
  auto median_last = [](const std::vector<nlohmann::json>& hs) {
    std::vector<double> v;
    for (size_t i = hs.size() - 20; i < hs.size(); ++i) v.push_back(objective(hs[i]));
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const auto t = run(*tpe, 60), r = run(*random, 60);
  REQUIRE(t.size() == 60);
  MESSAGE("60 trials: best ", best(t), " (TPE) vs ", best(r), " (random); median of the last 20 ",
          median_last(t), " vs ", median_last(r));
  CHECK(best(t) < best(r));
  // Its last 20 suggestions sit near the optimum; random's do not.
  CHECK(median_last(t) < 0.5 * median_last(r));
  for (const auto& h : t) {
    CHECK(h["fixed"] == 7);
    CHECK((h["layers"] >= 1 && h["layers"] <= 8));
  }
}

TEST_CASE("TPE: a restored searcher suggests what the original does") {
  auto a = make_search_method(config("tpe", 40));
  std::vector<Action> queue = a->initial_trials();
  for (int i = 0; i < 15; ++i) {
    const Action t = queue.front();
    queue.erase(queue.begin());
    a->validation_completed(t.request_id, 10, objective(t.hparams));
    for (const Action& b : a->trial_exited(t.request_id)) queue.push_back(b);
  }
  const nlohmann::json state = a->snapshot();
  auto b = make_search_method(config("tpe", 40));
  b->restore(state);
  const Action next = queue.front();
  a->validation_completed(next.request_id, 10, 1.0);
  b->validation_completed(next.request_id, 10, 1.0);
  CHECK(a->trial_exited(next.request_id) == b->trial_exited(next.request_id));
}
