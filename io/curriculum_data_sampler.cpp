#include "tessera/io/curriculum_data_sampler.h"

#include <algorithm>
#include <numeric>

#include "tessera/error.h"
#include "tessera/io/json_fields.h"
#include "tessera/philox.h"

namespace tessera::io {

namespace {

constexpr uint32_t kClusterStream = 0x434c5553u;  // "CLUS": a cluster's shuffles
constexpr uint32_t kChoiceStream = 0x43484f49u;   // "CHOI": the clusters a batch reads
constexpr uint32_t kBatchStream = 0x42415443u;    // "BATC": the batch's order

// A uniform double in [0, 1) from Philox, keyed by (seed, stream, a) at counter b.
double uniform(uint64_t seed, uint32_t stream, uint64_t a, uint64_t b) {
  const std::array<uint32_t, 4> r =
      philox4x32_10({static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32),
                     static_cast<uint32_t>(a), static_cast<uint32_t>(a >> 32)},
                    {static_cast<uint32_t>(seed) ^ stream, static_cast<uint32_t>(seed >> 32)});
  const uint64_t bits = (static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1.0p-53;
}

void fisher_yates(std::vector<int64_t>& v, uint64_t seed, uint32_t stream, uint64_t a) {
  for (size_t i = v.size(); i-- > 1;) {
    const double u = uniform(seed, stream, a, i);
    const size_t j = std::min(i, static_cast<size_t>(u * static_cast<double>(i + 1)));
    std::swap(v[i], v[j]);
  }
}

std::string list_text(const std::vector<int64_t>& v) {
  return nlohmann::json(v).dump();
}

}  // namespace

CurriculumDataSampler::CurriculumDataSampler(int64_t samples, std::vector<CurriculumMetric> metrics,
                                             int64_t global_batch, uint64_t seed)
    : samples_(samples), global_batch_(global_batch), seed_(seed), metrics_(std::move(metrics)) {
  TS_CHECK(samples > 0, "data_sampling: the dataset has no samples");
  TS_CHECK(global_batch > 0, "data_sampling: a global batch of ", global_batch, " samples");
  TS_CHECK(!metrics_.empty(), "data_sampling: curriculum_learning names no curriculum_metrics");
  for (const CurriculumMetric& m : metrics_) {
    if (m.single_cluster) continue;
    TS_CHECK(m.percentile || m.index_to_metric.size() == m.index_to_sample.size(), m.name,
             ": index_to_metric has ", m.index_to_metric.size(), " rows, index_to_sample ",
             m.index_to_sample.size());
    TS_CHECK(!m.percentile || m.max_difficulty > 0, m.name, ": max_difficulty must be positive");
    for (const auto& row : m.index_to_sample)
      for (int64_t id : row)
        TS_CHECK(id >= 0 && id < samples, m.name, ": index_to_sample names sample ", id,
                 ", but the training data has ", samples,
                 " samples (was the index made for other data, or another block_size?)");
  }
}

std::vector<int64_t> CurriculumDataSampler::admitted(size_t metric, std::optional<int64_t> from,
                                                     int64_t to) const {
  const CurriculumMetric& m = metrics_[metric];
  std::vector<int64_t> out;
  if (!m.percentile) {  // get_sample_based_on_metric_value: rows with from < value <= to
    for (size_t r = 0; r < m.index_to_sample.size(); ++r)
      if (m.index_to_metric[r] <= to && (!from || m.index_to_metric[r] > *from))
        out.insert(out.end(), m.index_to_sample[r].begin(), m.index_to_sample[r].end());
    return out;
  }
  // get_sample_based_on_metric_percentile: the samples from count (size // max) * from to
  // (size // max) * to in the rows' order (to the end at the maximum).
  int64_t size = 0;
  for (const auto& row : m.index_to_sample) size += static_cast<int64_t>(row.size());
  const int64_t per = size / m.max_difficulty, start = per * from.value_or(0);
  const int64_t end = to == m.max_difficulty ? size : per * to;
  int64_t count = 0;
  for (const auto& row : m.index_to_sample) {
    const auto n = static_cast<int64_t>(row.size());
    if (count + n > start) {
      const int64_t lo = std::max<int64_t>(0, start - count);
      const int64_t hi = count + n <= end ? n : end - count;
      if (hi > lo) out.insert(out.end(), row.begin() + lo, row.begin() + hi);
    }
    count += n;
    if (count >= end) break;
  }
  return out;
}

void CurriculumDataSampler::form_cluster(const std::optional<std::vector<int64_t>>& from,
                                         const std::vector<int64_t>& to) {
  size_t clustering = 0;
  for (const CurriculumMetric& m : metrics_) clustering += m.single_cluster ? 0 : 1;
  std::vector<int64_t> fresh;
  bool any = false;
  if (clustering > 1) {
    // Samples every metric admits up to its difficulty, less those of earlier clusters.
    std::vector<char> in(static_cast<size_t>(samples_), 1);
    for (size_t i = 0; i < metrics_.size(); ++i) {
      if (metrics_[i].single_cluster) continue;
      std::vector<char> ok(in.size(), 0);
      for (int64_t id : admitted(i, std::nullopt, to[i])) ok[static_cast<size_t>(id)] = 1;
      for (size_t s = 0; s < in.size(); ++s) in[s] = in[s] && ok[s];
    }
    for (const Cluster& c : clusters_)
      for (int64_t id : c.order) in[static_cast<size_t>(id)] = 0;
    for (size_t s = 0; s < in.size(); ++s)
      if (in[s]) fresh.push_back(static_cast<int64_t>(s));
    any = true;
  } else {
    if (clusters_.empty()) {
      fresh.resize(static_cast<size_t>(samples_));
      std::iota(fresh.begin(), fresh.end(), int64_t{0});
      any = true;
    }
    for (size_t i = 0; i < metrics_.size(); ++i) {
      if (metrics_[i].single_cluster) continue;
      fresh = admitted(i, from ? std::optional<int64_t>((*from)[i]) : std::nullopt, to[i]);
      any = true;
    }
  }
  if (!any || fresh.empty()) return;  // (no sample newly admitted: no cluster, as DeepSpeed)
  Cluster c{from.value_or(std::vector<int64_t>{}), to, std::move(fresh), 0, 0};
  shuffle(c, clusters_.size());
  clusters_.push_back(std::move(c));
}

void CurriculumDataSampler::shuffle(Cluster& c, size_t index) const {
  // Each order is drawn afresh from the sorted samples, so reshuffle k needs no earlier one.
  std::sort(c.order.begin(), c.order.end());
  fisher_yates(c.order, seed_, kClusterStream,
               (static_cast<uint64_t>(index) << 32) ^ static_cast<uint64_t>(c.shuffles));
}

std::vector<int64_t> CurriculumDataSampler::take(size_t index, int64_t count) {
  Cluster& c = clusters_[index];
  const auto size = static_cast<int64_t>(c.order.size());
  std::vector<int64_t> out;
  while (count > 0) {
    if (c.position == size) {  // used up: reshuffled, read again from its start
      ++c.shuffles;
      shuffle(c, index);
      c.position = 0;
    }
    const int64_t n = std::min(count, size - c.position);
    out.insert(out.end(), c.order.begin() + c.position, c.order.begin() + c.position + n);
    c.position += n;
    count -= n;
  }
  return out;
}

std::vector<int64_t> CurriculumDataSampler::next_global_batch(
    const std::vector<int64_t>& difficulties) {
  TS_CHECK(difficulties.size() == metrics_.size(), "data_sampling: ", difficulties.size(),
           " difficulties for ", metrics_.size(), " metrics");
  ++step_;
  if (!difficulties_ || *difficulties_ != difficulties) form_cluster(difficulties_, difficulties);
  difficulties_ = difficulties;
  if (clusters_.empty()) {
    std::string why;
    for (const CurriculumMetric& m : metrics_)
      if (m.percentile && samples_ < m.max_difficulty)
        why += " (" + m.name + " is a percentile metric: its " + std::to_string(samples_) +
               " samples are fewer than max_difficulty " + std::to_string(m.max_difficulty) +
               ", so each percentile below the last holds none)";
    fail("data_sampling: at curriculum step ", step_,
         " no training sample is admitted by the metrics' difficulties ", list_text(difficulties),
         why, "; raise min_difficulty");
  }
  // sample_from_clusters: each sample's cluster drawn in proportion to the clusters' sizes.
  std::vector<int64_t> bounds;
  int64_t total = 0;
  for (const Cluster& c : clusters_)
    bounds.push_back(total += static_cast<int64_t>(c.order.size()));
  std::vector<int64_t> counts(clusters_.size(), 0);
  for (int64_t i = 0; i < global_batch_; ++i) {
    const double u =
        uniform(seed_, kChoiceStream, static_cast<uint64_t>(step_), static_cast<uint64_t>(i));
    const auto at = std::min(total - 1, static_cast<int64_t>(u * static_cast<double>(total)));
    ++counts[static_cast<size_t>(std::upper_bound(bounds.begin(), bounds.end(), at) -
                                 bounds.begin())];
  }
  std::vector<int64_t> batch;
  for (size_t c = 0; c < clusters_.size(); ++c) {
    const std::vector<int64_t> part = take(c, counts[c]);
    batch.insert(batch.end(), part.begin(), part.end());
  }
  fisher_yates(batch, seed_, kBatchStream, static_cast<uint64_t>(step_));
  return batch;
}

std::vector<int64_t> CurriculumDataSampler::cluster_sizes() const {
  std::vector<int64_t> out;
  for (const Cluster& c : clusters_) out.push_back(static_cast<int64_t>(c.order.size()));
  return out;
}

std::vector<int64_t> CurriculumDataSampler::cluster_samples(size_t index) const {
  TS_CHECK(index < clusters_.size(), "data_sampling: cluster ", index, " of ", clusters_.size());
  std::vector<int64_t> out = clusters_[index].order;
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json CurriculumDataSampler::state() const {
  nlohmann::json clusters = nlohmann::json::array();
  for (const Cluster& c : clusters_)
    clusters.push_back({{"from", c.from},
                        {"to", c.to},
                        {"size", c.order.size()},
                        {"position", c.position},
                        {"shuffles", c.shuffles}});
  return {{"curriculum_step", step_},
          {"difficulties", difficulties_ ? nlohmann::json(*difficulties_) : nlohmann::json()},
          {"clusters", clusters}};
}

void CurriculumDataSampler::set_state(const nlohmann::json& state) {
  const std::string what = "the checkpoint's data_sampling position";
  const JsonFields f(state, what);
  const auto step = static_cast<int64_t>(f.unsigned_integer("curriculum_step"));
  TS_CHECK(step >= 0, what, ": curriculum_step ", f.unsigned_integer("curriculum_step"),
           " is past int64");
  TS_CHECK(state.contains("clusters") && state["clusters"].is_array(), what, ": no cluster list");
  clusters_.clear();
  difficulties_.reset();
  auto difficulty_list = [&](const nlohmann::json& j, const char* key) {
    TS_CHECK(j.contains(key) && j[key].is_array(), what, ": '", key, "' is not a list");
    std::vector<int64_t> v;
    for (const auto& e : j[key]) {
      TS_CHECK(e.is_number_integer(), what, ": '", key, "' holds ", e.dump());
      v.push_back(e.get<int64_t>());
    }
    TS_CHECK(v.empty() || v.size() == metrics_.size(), what, ": '", key, "' has ", v.size(),
             " difficulties for ", metrics_.size(), " metrics (other curriculum_metrics?)");
    return v;
  };
  for (const auto& j : state["clusters"]) {
    const JsonFields c(j, what + "'s cluster");
    const std::vector<int64_t> from = difficulty_list(j, "from"), to = difficulty_list(j, "to");
    TS_CHECK(to.size() == metrics_.size(), what, ": a cluster without difficulties");
    const size_t before = clusters_.size();
    form_cluster(from.empty() ? std::nullopt : std::optional(from), to);
    TS_CHECK(clusters_.size() == before + 1 &&
                 clusters_.back().order.size() == c.unsigned_integer("size"),
             what, ": cluster ", before, " (difficulties ", list_text(to), ") held ",
             c.unsigned_integer("size"), " samples, these data and metrics give ",
             clusters_.size() == before ? 0 : clusters_.back().order.size(),
             ": the checkpoint belongs to another dataset or curriculum");
    Cluster& made = clusters_.back();
    made.shuffles = static_cast<int64_t>(c.unsigned_integer("shuffles"));
    if (made.shuffles > 0) shuffle(made, before);
    made.position = static_cast<int64_t>(c.unsigned_integer("position"));
    TS_CHECK(made.position >= 0 && made.shuffles >= 0 &&
                 made.position <= static_cast<int64_t>(made.order.size()),
             what, ": cluster ", before, " read position ", made.position, " is past its ",
             made.order.size(), " samples");
  }
  if (!state["difficulties"].is_null()) difficulties_ = difficulty_list(state, "difficulties");
  step_ = step;
}

}  // namespace tessera::io
