#include "tessera/trial/metrics_report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/error.h"
#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"

namespace tessera::trial {

namespace fs = std::filesystem;

nlohmann::json MetricsReport::to_json() const {
  nlohmann::json j = {{"type", kind == Kind::Training ? "training" : "validation"},
                      {"batches", batches},
                      {"epochs", epochs},
                      {"metrics", metrics}};
  if (!batch_metrics.is_null()) j["batch_metrics"] = batch_metrics;
  if (awaits_decision) j["awaits_decision"] = true;
  return j;
}

std::optional<MetricsReport> MetricsReport::parse(const std::string& line) {
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto type = j.find("type");
  const auto batches = j.find("batches");
  if (type == j.end() || !type->is_string() || batches == j.end() ||
      !io::JsonFields::is_int64(*batches))
    return std::nullopt;
  MetricsReport r;
  if (*type == "training")
    r.kind = Kind::Training;
  else if (*type == "validation")
    r.kind = Kind::Validation;
  else
    return std::nullopt;
  r.batches = batches->get<int64_t>();
  if (const auto e = j.find("epochs"); e != j.end() && io::JsonFields::is_int64(*e))
    r.epochs = e->get<int64_t>();
  if (const auto m = j.find("metrics"); m != j.end() && m->is_object()) r.metrics = *m;
  if (const auto b = j.find("batch_metrics"); b != j.end()) r.batch_metrics = *b;
  if (const auto a = j.find("awaits_decision"); a != j.end() && a->is_boolean())
    r.awaits_decision = a->get<bool>();
  return r;
}

void MetricsReport::append_to(const std::string& trial_dir) const {
  const fs::path path = fs::path(trial_dir) / kFileName;
  const std::string text = to_json().dump() + "\n";
  FILE* f = std::fopen(path.c_str(), "a");
  TS_CHECK(f, "cannot append to ", io::quoted(path.string()));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  TS_CHECK(std::fclose(f) == 0 && ok, "cannot write ", io::quoted(path.string()));
}

void MetricsReport::truncate(const std::string& trial_dir, int64_t batches) {
  const fs::path path = fs::path(trial_dir) / kFileName;
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string line, kept;
  while (std::getline(in, line)) {
    const std::optional<MetricsReport> r = parse(line);
    if (r && r->batches <= batches) kept += line + "\n";
  }
  io::write_file_atomically(path.string(), [&](std::ostream& out) { out << kept; });
}

MetricsTail::MetricsTail(const std::string& trial_dir)
    : path_((fs::path(trial_dir) / MetricsReport::kFileName).string()) {}

std::vector<MetricsReport> MetricsTail::read_new() {
  std::vector<MetricsReport> out;
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path_, ec);
  if (ec) return out;
  if (size < offset_) offset_ = 0;  // truncated by a resumed trial
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset_));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline yet: a line still being written
    offset_ += line.size() + 1;
    if (auto r = MetricsReport::parse(line)) out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace tessera::trial
