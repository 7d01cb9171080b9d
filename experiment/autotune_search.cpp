// The searcher `tessera autotune` runs (experiment/autotuner.h): searcher.name "autotune" over
// the categorical hyperparameter `config`, whose values are the points' config files
// ("z2_mbs4_gas2.json", as autotune_points names them). One trial at a time:
//   gridsearch   the points in order;
//   random       a shuffle of them by the experiment seed;
//   model_based  a few points spread over the ZeRO stages, then each next trial the point a
//                cost model fitted to every finished trial predicts best.
// Each stops after tuner_num_trials trials, or once tuner_early_stopping finished trials have
// brought no better metric.
//
// The cost model is ridge regression (closed form, lambda 1e-3 on the standardised features)
// of the metric on a point's ZeRO stage (one-hot), log2 of its micro-batch and that squared,
// and, with fast off, log10 of its reduce bucket and its overlap_comm: why this model: the
// points are few (tens), so a model with a handful of weights fits from 3-4 measurements where
// DeepSpeed's XGBoost ranker needs many; throughput is smooth in the micro-batch (more work per
// step, until memory or cache pressure bends it: the squared term) and shifts by stage.
#include <algorithm>
#include <cmath>
#include <regex>

#include "tessera/error.h"
#include "tessera/experiment/autotuner.h"
#include "tessera/experiment/searcher_registry.h"

namespace tessera::experiment {

namespace {

using nlohmann::json;

constexpr size_t kFeatures = 8;  // stage one-hot (4), log2 m, (log2 m)^2, log10 bucket, overlap

// A point's features from its file name; throws on a name autotune_points did not make.
std::vector<double> point_features(const std::string& file) {
  static const std::regex name(
      R"(z([0-3])_mbs([0-9]+)_gas([0-9]+)(?:_rbs([0-9]+))?(?:_(overlap|nooverlap))?\.json)");
  std::smatch m;
  TS_CHECK(std::regex_match(file, m, name), "searcher autotune: hyperparameter value '", file,
           "' is not one of `tessera autotune`'s point files (z<stage>_mbs<m>_gas<g>.json)");
  std::vector<double> f(4, 0.0);
  f[static_cast<size_t>(std::stoi(m[1]))] = 1.0;
  const double lm = std::log2(std::stod(m[2]));
  f.push_back(lm);
  f.push_back(lm * lm);
  f.push_back(m[4].matched ? std::log10(std::stod(m[4])) : 0.0);
  f.push_back(m[5].matched && m[5] == "overlap" ? 1.0 : 0.0);
  return f;
}

// Ridge regression: weights w minimising |X w - y|^2 + lambda |w|^2 over standardised columns
// (and an intercept), then the prediction for `x`.
class RidgeModel {
 public:
  RidgeModel(const std::vector<std::vector<double>>& X, const std::vector<double>& y) {
    TS_CHECK(!X.empty() && X.size() == y.size(), "autotune: a cost model needs measured points");
    const size_t n = X.size(), d = kFeatures;
    for (const auto& row : X)
      TS_CHECK(row.size() == d, "autotune: a point has ", row.size(), " features");
    mean_.assign(d, 0.0), scale_.assign(d, 1.0);
    for (size_t j = 0; j < d; ++j) {
      double s = 0, ss = 0;
      for (const auto& row : X) s += row[j], ss += row[j] * row[j];
      mean_[j] = s / static_cast<double>(n);
      const double var = ss / static_cast<double>(n) - mean_[j] * mean_[j];
      scale_[j] = var > 1e-12 ? std::sqrt(var) : 1.0;
    }
    y_mean_ = 0;
    for (double v : y) y_mean_ += v / static_cast<double>(n);
    // Normal equations (Z^T Z + lambda I) w = Z^T (y - mean), solved by Gaussian elimination.
    std::vector<std::vector<double>> A(d, std::vector<double>(d + 1, 0.0));
    for (size_t r = 0; r < n; ++r) {
      const std::vector<double> z = standardised(X[r]);
      for (size_t i = 0; i < d; ++i) {
        for (size_t j = 0; j < d; ++j) A[i][j] += z[i] * z[j];
        A[i][d] += z[i] * (y[r] - y_mean_);
      }
    }
    for (size_t i = 0; i < d; ++i) A[i][i] += 1e-3;
    for (size_t c = 0; c < d; ++c) {
      size_t pivot = c;
      for (size_t r = c + 1; r < d; ++r)
        if (std::fabs(A[r][c]) > std::fabs(A[pivot][c])) pivot = r;
      std::swap(A[c], A[pivot]);
      for (size_t r = 0; r < d; ++r) {
        if (r == c) continue;
        const double k = A[r][c] / A[c][c];
        for (size_t j = c; j <= d; ++j) A[r][j] -= k * A[c][j];
      }
    }
    w_.resize(d);
    for (size_t i = 0; i < d; ++i) w_[i] = A[i][d] / A[i][i];
  }
  double predict(const std::vector<double>& x) const {
    const std::vector<double> z = standardised(x);
    double out = y_mean_;
    for (size_t i = 0; i < z.size(); ++i) out += w_[i] * z[i];
    return out;
  }

 private:
  std::vector<double> standardised(const std::vector<double>& x) const {
    std::vector<double> z(x.size());
    for (size_t j = 0; j < x.size(); ++j) z[j] = (x[j] - mean_[j]) / scale_[j];
    return z;
  }
  std::vector<double> mean_, scale_, w_;
  double y_mean_ = 0;
};

class AutotuneSearch : public SearchMethod {
 public:
  AutotuneSearch(std::shared_ptr<SearchContext> c, std::string tuner, int64_t max_trials,
                 int64_t patience, bool smaller_is_better)
      : SearchMethod(std::move(c)),
        tuner_(std::move(tuner)),
        max_trials_(max_trials),
        patience_(patience),
        smaller_(smaller_is_better) {
    auto it = context_->hparams.find("config");
    TS_CHECK(it != context_->hparams.end() &&
                 it->second.type == trial::Hyperparameter::Categorical && !it->second.vals.empty(),
             "searcher autotune: needs the categorical hyperparameter 'config' (its points)");
    for (const json& v : it->second.vals) {
      TS_CHECK(v.is_string(), "searcher autotune: 'config' values must be file names");
      points_.push_back(v.get<std::string>());
      features_.push_back(point_features(points_.back()));
    }
    order_ = initial_order();
  }

  std::vector<Action> initial_trials() override {
    if (tuner_ == "random")
      for (size_t i = points_.size(); i > 1; --i)
        std::swap(order_[i - 1],
                  order_[static_cast<size_t>(context_->random.below(static_cast<int64_t>(i)))]);
    return next();
  }
  std::vector<Action> validation_completed(int64_t id, int64_t, double metric) override {
    metric_[id] = metric;
    return {};
  }
  std::vector<Action> trial_exited(int64_t id) override {
    if (metric_.count(id)) finished_.push_back(metric_[id]);
    return next();
  }
  std::vector<Action> trial_exited_early(int64_t id, ExitReason) override {
    metric_.erase(id);  // (a point whose trial failed is not measured; the search goes on)
    return next();
  }
  json snapshot(bool with_context) const override {
    json s = {{"order", order_}, {"tried", tried_}, {"finished", finished_}};
    for (const auto& [id, m] : metric_) s["metric"][std::to_string(id)] = m;
    for (const auto& [id, p] : point_of_) s["point_of"][std::to_string(id)] = p;
    if (with_context) s["context"] = context_state();
    return s;
  }
  void restore(const json& s, bool with_context) override {
    order_ = s.at("order").get<std::vector<size_t>>();
    tried_ = s.at("tried").get<std::vector<size_t>>();
    finished_ = s.at("finished").get<std::vector<double>>();
    metric_.clear(), point_of_.clear();
    if (s.contains("metric"))
      for (const auto& [id, m] : s["metric"].items()) metric_[std::stoll(id)] = m.get<double>();
    if (s.contains("point_of"))
      for (const auto& [id, p] : s["point_of"].items()) point_of_[std::stoll(id)] = p.get<size_t>();
    if (with_context) restore_context(s.at("context"));
  }

 private:
  // The next trial, or none: the budget is spent, every point tried, or the search is stale.
  std::vector<Action> next() {
    if (static_cast<int64_t>(tried_.size()) >= max_trials_ || tried_.size() >= points_.size() ||
        autotune_stale(finished_, patience_, smaller_ ? "latency" : "throughput"))
      return {};
    const size_t point = tuner_ == "model_based" ? model_choice() : untried_in_order();
    tried_.push_back(point);
    Action a = context_->create({{"config", points_[point]}});
    point_of_[a.request_id] = point;
    return {a};
  }
  std::vector<size_t> initial_order() const {
    std::vector<size_t> o(points_.size());
    for (size_t i = 0; i < o.size(); ++i) o[i] = i;
    return o;
  }
  size_t untried_in_order() const {
    for (size_t i : order_)
      if (std::find(tried_.begin(), tried_.end(), i) == tried_.end()) return i;
    return 0;
  }
  // Until 3 points are measured: the largest micro-batch of each stage in turn (points come
  // stage by stage, micro-batches ascending); then the model's best prediction.
  size_t model_choice() const {
    std::vector<std::vector<double>> X;
    std::vector<double> y;
    for (const auto& [id, m] : metric_) {
      X.push_back(features_[point_of_.at(id)]);
      y.push_back(m);
    }
    if (X.size() < 3) {
      for (size_t i = points_.size(); i-- > 0;) {
        const bool last_of_stage = i + 1 == points_.size() || stage_of(i + 1) != stage_of(i);
        if (last_of_stage && std::find(tried_.begin(), tried_.end(), i) == tried_.end() &&
            !stage_tried(stage_of(i)))
          return i;
      }
      return untried_in_order();
    }
    const RidgeModel model(X, y);
    std::optional<size_t> best;
    double best_value = 0;
    for (size_t i = 0; i < points_.size(); ++i) {
      if (std::find(tried_.begin(), tried_.end(), i) != tried_.end()) continue;
      const double v = model.predict(features_[i]);
      if (!best || (smaller_ ? v < best_value : v > best_value)) best = i, best_value = v;
    }
    return best.value_or(untried_in_order());
  }
  int stage_of(size_t i) const {
    return static_cast<int>(std::max_element(features_[i].begin(), features_[i].begin() + 4) -
                            features_[i].begin());
  }
  bool stage_tried(int stage) const {
    for (size_t t : tried_)
      if (stage_of(t) == stage) return true;
    return false;
  }

  std::string tuner_;
  int64_t max_trials_, patience_;
  bool smaller_;
  std::vector<std::string> points_;
  std::vector<std::vector<double>> features_;
  std::vector<size_t> order_, tried_;
  std::vector<double> finished_;        // metrics in the order trials finished
  std::map<int64_t, double> metric_;    // trial -> its validation metric
  std::map<int64_t, size_t> point_of_;  // trial -> its point
};

SearcherEntry autotune_entry() {
  using Kind = trial::SearcherParam::Kind;
  SearcherEntry e{
      {.type = "autotune",
       .doc = "`tessera autotune`'s points one at a time: gridsearch, random or model_based "
              "(ridge regression of the metric on stage and micro-batch)",
       .params = {{.name = "tuner_type",
                   .kind = Kind::Choice,
                   .default_value = "gridsearch",
                   .choices = {"gridsearch", "random", "model_based"},
                   .doc = "the order of the points"},
                  {.name = "tuner_num_trials",
                   .kind = Kind::Count,
                   .default_value = 50,
                   .min = 1,
                   .doc = "the most trials"},
                  {.name = "tuner_early_stopping",
                   .kind = Kind::Count,
                   .default_value = 5,
                   .min = 1,
                   .doc = "stop after this many finished trials without a better metric"}},
       .lengths_in_batches = true}};
  e.build = [](std::shared_ptr<SearchContext> c, const trial::ExperimentConfig::Searcher& s) {
    return std::make_unique<AutotuneSearch>(c, s.choice("tuner_type"), s.count("tuner_num_trials"),
                                            s.count("tuner_early_stopping"), s.smaller_is_better);
  };
  return e;
}

const RegisterSearcher kAutotuneSearcher{autotune_entry()};

}  // namespace

}  // namespace tessera::experiment
