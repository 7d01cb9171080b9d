#include "tessera/io/window_metrics.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <vector>

#include "tessera/error.h"
#include "tessera/io/files.h"

namespace tessera::io {

const std::vector<std::string>& built_in_window_metrics() {
  static const std::vector<std::string> names{"vocabularyrarity"};
  return names;
}

std::vector<int64_t> vocabulary_rarity(const TokenFile& tokens, int64_t block) {
  TS_CHECK(block >= 1 && tokens.size() >= block + 1, "vocabularyrarity: ", tokens.size(),
           " tokens hold no window of ", block + 1);
  const int32_t* t = tokens.data();
  const auto [lo_at, hi_at] = std::minmax_element(t, t + tokens.size());
  const int64_t lo = *lo_at, span = static_cast<int64_t>(*hi_at) - lo + 1;
  TS_CHECK(lo >= 0 && span <= (int64_t{1} << 26), "vocabularyrarity: token ids from ", lo, " to ",
           *hi_at, " are not a vocabulary's (a damaged token cache?)");
  std::vector<int64_t> counts(static_cast<size_t>(span), 0);
  for (int64_t i = 0; i < tokens.size(); ++i) ++counts[static_cast<size_t>(t[i] - lo)];
  // -ln(count / total) per token id, once.
  std::vector<double> by_id(counts.size(), 0.0);
  const auto total = static_cast<double>(tokens.size());
  for (size_t id = 0; id < counts.size(); ++id)
    if (counts[id] > 0) by_id[id] = -std::log(static_cast<double>(counts[id]) / total);
  const int64_t windows = (tokens.size() - 1) / block;
  std::vector<int64_t> out(static_cast<size_t>(windows));
  for (int64_t w = 0; w < windows; ++w) {
    double sum = 0;
    for (int64_t i = w * block; i < (w + 1) * block; ++i)
      sum += by_id[static_cast<size_t>(t[i] - lo)];
    out[static_cast<size_t>(w)] = static_cast<int64_t>(std::floor(sum));
  }
  return out;
}

std::vector<int64_t> read_metric_values(const std::string& prefix, const std::string& what) {
  const IndexedRows rows = read_indexed_dataset(prefix, what);
  std::vector<int64_t> values;
  for (size_t r = 0; r < rows.size(); ++r) {
    TS_CHECK(rows[r].size() == 1, what, "'s ", quoted(prefix + ".idx"), ": row ", r, " holds ",
             rows[r].size(), " values, expected 1 (index_to_metric has one value a row)");
    values.push_back(rows[r][0]);
  }
  return values;
}

MetricIndex index_by_value(const std::vector<int64_t>& values) {
  std::map<int64_t, std::vector<int64_t>> rows;
  for (size_t s = 0; s < values.size(); ++s) rows[values[s]].push_back(static_cast<int64_t>(s));
  MetricIndex out;
  for (auto& [value, samples] : rows) {
    out.index_to_metric.push_back(value);
    out.index_to_sample.push_back(std::move(samples));
  }
  return out;
}

MetricIndex cached_window_metric(const std::string& dir, const std::string& name,
                                 const TokenFile& tokens, int64_t block) {
  TS_CHECK(name == "vocabularyrarity", "data_sampling: no built-in metric '", name, "'");
  const std::string base = dir + "/" + name + "-block" + std::to_string(block);
  const std::string samples = base + "_index_to_sample", metric = base + "_index_to_metric";
  namespace fs = std::filesystem;
  auto complete = [](const std::string& p) {
    return fs::exists(p + ".idx") && fs::exists(p + ".bin");
  };
  if (complete(samples) && complete(metric)) {
    MetricIndex cached;
    cached.index_to_sample = read_indexed_dataset(samples, "the " + name + " cache");
    cached.index_to_metric = read_metric_values(metric, "the " + name + " cache");
    return cached;
  }
  MetricIndex made = index_by_value(vocabulary_rarity(tokens, block));
  try {
    check_writable_directory(dir, "the " + name + " cache");
    write_indexed_dataset(samples, made.index_to_sample);
    IndexedRows values;
    for (int64_t v : made.index_to_metric) values.push_back({v});
    write_indexed_dataset(metric, values);
  } catch (const Error& e) {
    // (a read-only cache costs the computation again next time, nothing else)
    std::cerr << "data: warning: " << name << " is not cached (" << e.what()
              << "); computed for this run only\n";
  }
  return made;
}

}  // namespace tessera::io
