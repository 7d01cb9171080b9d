// Loading the catalog's independent float64 results (tests/fixtures/catalog_reference.json).
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/io/files.h"
#include "tessera/op_catalog.h"
#include "tessera/ops.h"

namespace tessera::testing {

namespace {

using json = nlohmann::json;

// {"shape": [...], "dtype": "float64" | "int64" | "bool", "data": [...]} as a CPU tensor.
Tensor decode(const json& j, const std::string& where) {
  TS_CHECK(j.is_object() && j.contains("shape") && j.contains("dtype") && j.contains("data"), where,
           ": expected {shape, dtype, data}");
  TS_CHECK(j["shape"].is_array() && j["data"].is_array() && j["dtype"].is_string(), where,
           ": shape and data must be lists, dtype a string");
  Shape shape;
  int64_t numel = 1;
  for (const json& d : j["shape"]) {
    TS_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0 && d.get<int64_t>() < (1 << 24), where,
             ": bad dimension ", d.dump());
    shape.push_back(d.get<int64_t>());
    numel *= shape.back();
    TS_CHECK(numel < (int64_t{1} << 30), where, ": shape too large");
  }
  TS_CHECK(static_cast<int64_t>(j["data"].size()) == numel, where, ": ", j["data"].size(),
           " values for shape ", shape_str(shape));
  const std::string dt = j["dtype"];
  std::vector<double> v;
  v.reserve(static_cast<size_t>(numel));
  for (const json& x : j["data"]) {
    TS_CHECK(x.is_number() || x.is_boolean(), where, ": non-numeric value ", x.dump());
    v.push_back(x.is_boolean() ? (x.get<bool>() ? 1.0 : 0.0) : x.get<double>());
  }
  if (dt == "int64") {
    std::vector<int64_t> iv(v.begin(), v.end());
    return from_vector(iv, shape, DType::Int64);
  }
  TS_CHECK(dt == "float64" || dt == "bool", where, ": dtype '", dt, "' is not float64/int64/bool");
  return from_vector(v, shape, dt == "bool" ? DType::Bool : DType::Float64);
}

Tensor decode_optional(const json& j, const std::string& where) {
  return j.is_null() ? Tensor() : decode(j, where);
}

}  // namespace

CatalogReference CatalogReference::load(const std::string& path) {
  json root;
  try {
    root = json::parse(io::read_text_file(path));
  } catch (const json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
  TS_CHECK(root.is_object() && root.contains("cases") && root["cases"].is_array(), path,
           ": expected an object with a 'cases' list");
  CatalogReference ref;
  ref.path_ = path;
  for (const json& c : root["cases"]) {
    TS_CHECK(c.is_object() && c.contains("op") && c.contains("label") && c["op"].is_string() &&
                 c["label"].is_string(),
             path, ": every case needs 'op' and 'label'");
    const std::string where =
        path + ": " + c["op"].get<std::string>() + " [" + c["label"].get<std::string>() + "]";
    CaseReference cr;
    cr.source = c.value("source", "pytorch");
    for (const json& in : c.value("inputs", json::array())) cr.inputs.push_back(decode(in, where));
    if (c.contains("output")) cr.output = decode(c["output"], where + " output");
    if (c.contains("output_by_dtype"))
      for (auto& [k, v] : c["output_by_dtype"].items())
        cr.output_by_dtype[k] = decode(v, where + " output " + k);
    if (c.contains("v")) cr.v = decode_optional(c["v"], where + " v");
    for (const json& g : c.value("grads", json::array()))
      cr.grads.push_back(decode_optional(g, where + " gradient"));
    ref.cases_[{c["op"], c["label"]}] = std::move(cr);
  }
  return ref;
}

std::optional<CatalogReference> CatalogReference::find(const std::string& explicit_path,
                                                       std::string* tried) {
  std::vector<std::string> places;
  if (!explicit_path.empty()) {
    places.push_back(explicit_path);
  } else {
    places.push_back(std::string(TESSERA_DATA_DIR) + "/catalog_reference.json");
    places.push_back(std::string(TESSERA_SOURCE_FIXTURES_DIR) + "/catalog_reference.json");
  }
  for (const std::string& p : places) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(p, ec)) return load(p);
  }
  if (tried) {
    tried->clear();
    for (const std::string& p : places) *tried += (tried->empty() ? "" : ", ") + p;
  }
  TS_CHECK(explicit_path.empty(), "catalog reference '", explicit_path, "' does not exist");
  return std::nullopt;
}

const CaseReference* CatalogReference::find_case(const std::string& op,
                                                 const std::string& label) const {
  auto it = cases_.find({op, label});
  return it == cases_.end() ? nullptr : &it->second;
}

}  // namespace tessera::testing
