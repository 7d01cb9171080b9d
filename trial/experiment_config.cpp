// Determined's experiment YAML through yaml-cpp: every value checked where it is read, with
// the file and line in the message.
#include "tessera/trial/experiment_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "tessera/error.h"
#include "tessera/io/closest_name.h"
#include "tessera/io/files.h"
#include "tessera/io/identity.h"
#include "tessera/io/utf8_validation.h"
#include "tessera/trial/searcher_schema.h"

namespace tessera::trial {

std::string Length::str() const {
  static const char* units[] = {"batches", "records", "epochs"};
  return std::to_string(value) + " " + units[unit];
}

namespace {

const nlohmann::json& searcher_param(const ExperimentConfig::Searcher& s, const std::string& key,
                                     bool (nlohmann::json::*is_kind)() const noexcept,
                                     const char* kind) {
  const auto it = s.params.find(key);
  TS_CHECK(it != s.params.end(), "searcher ", s.name, ": 'searcher.", key,
           "' is not one of its keys");
  TS_CHECK(((*it).*is_kind)(), "searcher ", s.name, ": 'searcher.", key, "' is not ", kind);
  return *it;
}

}  // namespace

int64_t ExperimentConfig::Searcher::count(const std::string& key) const {
  return searcher_param(*this, key, &nlohmann::json::is_number_integer, "an integer")
      .get<int64_t>();
}
double ExperimentConfig::Searcher::number(const std::string& key) const {
  return searcher_param(*this, key, &nlohmann::json::is_number, "a number").get<double>();
}
std::string ExperimentConfig::Searcher::choice(const std::string& key) const {
  return searcher_param(*this, key, &nlohmann::json::is_string, "a string").get<std::string>();
}
std::vector<int64_t> ExperimentConfig::Searcher::counts(const std::string& key) const {
  return searcher_param(*this, key, &nlohmann::json::is_array, "a list")
      .get<std::vector<int64_t>>();
}

namespace {

// A YAML mapping being read: typed getters that name the key and line, and a warning for every
// key nobody read.
// Aliases make a YAML document a graph: `&a [*a]` is a cycle and nested aliases (a "billion
// laughs") expand exponentially. yaml-cpp shares aliased nodes, so only our walks of the document
// can blow up: each is bounded in depth and in the values it expands. 100,000 values is far
// beyond any experiment's file and is refused at once (at 10^6 a "billion laughs" file took 21 s
// to refuse under ASan).
struct WalkBudget {
  static constexpr int kMaxDepth = 64;
  static constexpr int64_t kMaxValues = 100'000;
  int64_t values = 0;
  void enter(int depth, const std::string& where) {
    TS_CHECK(depth <= kMaxDepth, where, ": values nested more than ", kMaxDepth,
             " deep (a self-referencing alias such as `&a [*a]`?)");
    TS_CHECK(++values <= kMaxValues, where, ": the document expands to more than ", kMaxValues,
             " values (aliases of aliases?)");
  }
};

class Node {
 public:
  Node(YAML::Node n, std::string path, const std::string& source, std::vector<std::string>& warn,
       WalkBudget& budget)
      : n_(std::move(n)),
        path_(std::move(path)),
        source_(source),
        warnings_(warn),
        budget_(budget) {
    if (!n_.IsMap()) fail(where(n_), ": '", path_.empty() ? "the file" : path_, "' must be a map");
  }
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  std::string where(const YAML::Node& n) const {
    return source_ + (n.Mark().line >= 0 ? ":" + std::to_string(n.Mark().line + 1) : "");
  }
  bool has(const std::string& k) {
    seen_.insert(k);
    return n_[k] && !n_[k].IsNull();
  }
  YAML::Node raw(const std::string& k) {
    seen_.insert(k);
    return n_[k];
  }
  template <class T>
  void get(const std::string& k, T& out) {
    if (!has(k)) return;
    out = as<T>(n_[k], key(k));
  }
  template <class T>
  T as(const YAML::Node& v, const std::string& what) const {
    const char* expect = std::is_same_v<T, bool>       ? "true or false"
                         : std::is_integral_v<T>       ? "an integer"
                         : std::is_floating_point_v<T> ? "a number"
                                                       : "a string";
    if (!v.IsScalar()) fail(where(v), ": '", what, "' must be ", expect);
    try {
      return v.as<T>();
    } catch (const YAML::Exception&) {
      fail(where(v), ": '", what, "' must be ", expect, ", found '", v.Scalar(), "'");
    }
  }
  Node sub(const std::string& k) { return Node(raw(k), key(k), source_, warnings_, budget_); }
  // Each key nobody read, with the read key it most likely meant ("(did you mean ...?)").
  void warn_unknown() const {
    std::vector<std::string> known;
    for (const std::string& k : seen_) known.push_back(k);
    for (const auto& kv : n_) {
      const std::string k = kv.first.as<std::string>();
      if (seen_.count(k)) continue;
      const auto meant = io::closest_name(k, known);
      warnings_.push_back(where(kv.first) + ": unknown key '" + key(k) + "' (ignored)" +
                          (meant ? " (did you mean '" + key(*meant) + "'?)" : ""));
    }
  }
  // The map's keys that nobody has read so far.
  std::vector<std::string> unread_keys() const {
    std::vector<std::string> out;
    for (const auto& kv : n_)
      if (!seen_.count(kv.first.as<std::string>())) out.push_back(kv.first.as<std::string>());
    return out;
  }
  const YAML::Node& node() const { return n_; }
  const std::string& source() const { return source_; }
  std::vector<std::string>& warnings() { return warnings_; }
  WalkBudget& budget() { return budget_; }

 private:
  YAML::Node n_;
  std::string path_;
  const std::string& source_;
  std::vector<std::string>& warnings_;
  WalkBudget& budget_;
  std::set<std::string> seen_;
};

nlohmann::json to_json(const YAML::Node& n, Node& at, int depth = 0) {
  at.budget().enter(depth, at.where(n));
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : n) a.push_back(to_json(x, at, depth + 1));
    return a;
  }
  if (n.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& kv : n) o[kv.first.as<std::string>()] = to_json(kv.second, at, depth + 1);
    return o;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string s = n.Scalar();
  // Plain scalars: YAML's booleans and numbers; quoted ones stay strings.
  if (n.Tag() != "!") {
    if (s == "true" || s == "True") return true;
    if (s == "false" || s == "False") return false;
    try {
      size_t used = 0;
      const long long i = std::stoll(s, &used);
      if (used == s.size()) return i;
      const double d = std::stod(s, &used);
      if (used == s.size()) return d;
    } catch (const std::exception&) {
    }
  }
  return s;
}

void parse_resources(Node& root, ExperimentConfig& c) {
  Node r = root.sub("resources");
  r.get("slots_per_trial", c.slots_per_trial);
  TS_CHECK(c.slots_per_trial >= 1, r.where(r.node()), ": 'resources.slots_per_trial' must be >= 1");
  r.get("max_slots", c.max_slots);
  TS_CHECK(c.max_slots >= 0, r.where(r.node()),
           ": 'resources.max_slots' must be >= 1 (or 0: the machine's cores)");
  TS_CHECK(c.max_slots == 0 || c.max_slots >= c.slots_per_trial, r.where(r.node()),
           ": 'resources.max_slots' (", c.max_slots, ") is fewer than slots_per_trial (",
           c.slots_per_trial, "): no trial could start");
  r.get("scheduler", c.scheduler);
  TS_CHECK(c.scheduler == "local" || c.scheduler == "slurm", r.where(r.node()),
           ": 'resources.scheduler' is '", c.scheduler, "'; expected local or slurm");
  if (r.has("slurm")) {
    Node s = r.sub("slurm");
    s.get("partition", c.slurm.partition);
    s.get("time_limit", c.slurm.time_limit);
    s.get("gpus_per_slot", c.slurm.gpus_per_slot);
    TS_CHECK(c.slurm.gpus_per_slot >= 0, s.where(s.node()),
             ": 'resources.slurm.gpus_per_slot' must be >= 0");
    if (s.has("srun_args")) {
      const YAML::Node a = s.raw("srun_args");
      TS_CHECK(a.IsSequence(), s.where(a), ": 'resources.slurm.srun_args' must be a list");
      for (const auto& x : a) c.slurm.srun_args.push_back(s.as<std::string>(x, "srun_args"));
    }
    s.warn_unknown();
  }
  r.warn_unknown();
}

Length parse_length(Node& parent, const std::string& k) {
  const YAML::Node v = parent.raw(k);
  const std::string what = parent.key(k);
  if (!v.IsMap() || v.size() != 1)
    fail(parent.where(v), ": '", what, "' must be a map with one of batches, records, epochs");
  const std::string unit = v.begin()->first.as<std::string>();
  Length l;
  if (unit == "batches")
    l.unit = Length::Batches;
  else if (unit == "records")
    l.unit = Length::Records;
  else if (unit == "epochs")
    l.unit = Length::Epochs;
  else
    fail(parent.where(v), ": '", what, "' has unit '", unit,
         "'; expected batches, records or epochs");
  l.value = parent.as<int64_t>(v.begin()->second, what + "." + unit);
  TS_CHECK(l.value > 0, parent.where(v), ": '", what, ".", unit, "' must be > 0, found ", l.value);
  return l;
}

Hyperparameter parse_hparam(Node& h, const std::string& what) {
  Hyperparameter p;
  std::string type;
  h.get("type", type);
  if (type == "const") {
    p.type = Hyperparameter::Const;
    TS_CHECK(h.has("val"), h.where(h.node()), ": '", what, "' (const) needs 'val'");
    p.val = to_json(h.raw("val"), h);
  } else if (type == "int" || type == "double" || type == "log") {
    p.type = type == "int"      ? Hyperparameter::Int
             : type == "double" ? Hyperparameter::Double
                                : Hyperparameter::Log;
    for (const char* k : {"minval", "maxval"})
      TS_CHECK(h.has(k), h.where(h.node()), ": '", what, "' (", type, ") needs '", k, "'");
    if (p.type == Hyperparameter::Int) {
      // Held as doubles (as Determined's): within +-2^53 every integer is exact, and the
      // range's size fits an int64.
      constexpr int64_t kExact = int64_t{1} << 53;
      for (auto [k, out] : {std::pair{"minval", &p.minval}, std::pair{"maxval", &p.maxval}}) {
        const int64_t v = h.as<int64_t>(h.raw(k), what + "." + k);
        TS_CHECK(v >= -kExact && v <= kExact, h.where(h.node()), ": '", what, ".", k, "' is ", v,
                 "; an int hyperparameter lies within +-2^53 (", kExact, ")");
        *out = static_cast<double>(v);
      }
    } else {
      h.get("minval", p.minval);
      h.get("maxval", p.maxval);
    }
    TS_CHECK(p.minval < p.maxval, h.where(h.node()), ": '", what, "': minval ", p.minval,
             " must be less than maxval ", p.maxval);
    h.get("base", p.base);
    TS_CHECK(p.type != Hyperparameter::Log || (p.base > 0 && p.base != 1), h.where(h.node()), ": '",
             what, ".base' must be positive and not 1, found ", p.base);
  } else if (type == "categorical") {
    p.type = Hyperparameter::Categorical;
    const YAML::Node vals = h.raw("vals");
    TS_CHECK(vals && vals.IsSequence() && vals.size() > 0, h.where(h.node()), ": '", what,
             "' (categorical) needs a non-empty list 'vals'");
    for (const auto& v : vals) p.vals.push_back(to_json(v, h, 1));
  } else {
    fail(h.where(h.node()), ": '", what, ".type' is '", type,
         "'; expected const, int, double, log or categorical");
  }
  if (h.has("count")) {
    p.count = h.as<int64_t>(h.raw("count"), what + ".count");
    TS_CHECK(*p.count > 0, h.where(h.node()), ": '", what, ".count' must be > 0");
  }
  h.warn_unknown();
  return p;
}

// A hyperparameter is a bare value (a constant), a map with 'type', or a nested group.
void parse_hparams(const YAML::Node& n, const std::string& prefix, Node& parent,
                   std::map<std::string, Hyperparameter>& out, int depth = 1) {
  for (const auto& kv : n) {
    const std::string name = prefix + kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    parent.budget().enter(depth, parent.where(v) + ": 'hyperparameters." + name + "'");
    if (v.IsMap() && v["type"]) {
      Node h(v, "hyperparameters." + name, parent.source(), parent.warnings(), parent.budget());
      out[name] = parse_hparam(h, "hyperparameters." + name);
    } else if (v.IsMap()) {
      parse_hparams(v, name + ".", parent, out, depth + 1);
    } else {
      Hyperparameter c;
      c.val = to_json(v, parent, depth);
      out[name] = c;
    }
  }
}

// One key of the searcher's own (its schema's row): its value, its default, or an error.
nlohmann::json parse_searcher_param(Node& s, const SearcherParam& p, const std::string& searcher) {
  using Kind = SearcherParam::Kind;
  const std::string what = "searcher." + p.name;
  if (!s.has(p.name)) {
    const auto misspelt = io::closest_name(p.name, s.unread_keys());
    TS_CHECK(!p.required(), s.where(s.node()), ": '", what, "' is required by the ", searcher,
             " searcher", misspelt ? " (is '" + s.key(*misspelt) + "' it, misspelt?)" : "");
    return p.kind == Kind::CountList && p.default_value.is_null() ? nlohmann::json::array()
                                                                  : p.default_value;
  }
  const YAML::Node v = s.raw(p.name);
  auto in_range = [&](double x) {
    return (p.min_exclusive ? x > p.min : x >= p.min) && (!p.max || x <= *p.max);
  };
  switch (p.kind) {
    case Kind::Count: {
      const auto x = s.as<int64_t>(v, what);
      TS_CHECK(in_range(static_cast<double>(x)), s.where(s.node()), ": '", what, "' is ", x,
               ", expected ", p.range_text());
      return x;
    }
    case Kind::Number: {
      const auto x = s.as<double>(v, what);
      TS_CHECK(std::isfinite(x), s.where(s.node()), ": '", what, "' is ", x,
               ", expected a finite number");
      TS_CHECK(in_range(x), s.where(s.node()), ": '", what, "' is ", x, ", expected ",
               p.range_text());
      return x;
    }
    case Kind::Choice: {
      const auto x = s.as<std::string>(v, what);
      TS_CHECK(std::find(p.choices.begin(), p.choices.end(), x) != p.choices.end(),
               s.where(s.node()), ": '", what, "' is '", x, "'; expected ", p.range_text());
      return x;
    }
    case Kind::CountList: {
      TS_CHECK(v.IsSequence(), s.where(v), ": '", what, "' must be a list of integers");
      nlohmann::json out = nlohmann::json::array();
      for (const auto& e : v) {
        const auto x = s.as<int64_t>(e, what);
        TS_CHECK(in_range(static_cast<double>(x)), s.where(v), ": '", what, "' entries must be ",
                 p.range_text());
        out.push_back(x);
      }
      return out;
    }
  }
  return nullptr;
}

// The keys every searcher reads, then the searcher's own against its registered schema.
void parse_searcher(Node& root, ExperimentConfig& c) {
  TS_CHECK(root.has("searcher"), root.source(), ": 'searcher' is required");
  Node s = root.sub("searcher");
  auto& se = c.searcher;
  s.get("name", se.name);
  const SearcherSchema* schema = find_searcher_schema(se.name);
  TS_CHECK(schema != nullptr, s.where(s.node()), ": 'searcher.name' is '", se.name, "'; expected ",
           registered_searcher_schemas_text());
  for (const SearcherParam& p : schema->params)
    se.params[p.name] = parse_searcher_param(s, p, se.name);
  TS_CHECK(s.has("metric"), s.where(s.node()), ": 'searcher.metric' is required");
  s.get("metric", se.metric);
  s.get("smaller_is_better", se.smaller_is_better);
  TS_CHECK(s.has("max_length"), s.where(s.node()), ": 'searcher.max_length' is required");
  se.max_length = parse_length(s, "max_length");
  s.warn_unknown();
}

void parse_storage(Node& root, ExperimentConfig& c) {
  if (!root.has("checkpoint_storage")) return;
  Node s = root.sub("checkpoint_storage");
  auto& st = c.checkpoint_storage;
  s.get("type", st.type);
  TS_CHECK(st.type == "shared_fs", s.where(s.node()), ": 'checkpoint_storage.type' is '", st.type,
           "'; only shared_fs is available here (no network storage)");
  s.get("host_path", st.host_path);
  s.get("storage_path", st.storage_path);
  // A subdirectory of host_path, never a way out of it.
  for (const auto& part : std::filesystem::path(st.storage_path))
    TS_CHECK(part != ".." && !std::filesystem::path(st.storage_path).is_absolute(),
             s.where(s.node()), ": 'checkpoint_storage.storage_path' ('", st.storage_path,
             "') must be a relative path inside host_path, without '..'");
  TS_CHECK(!st.host_path.empty(), s.where(s.node()),
           ": 'checkpoint_storage.host_path' is required for shared_fs");
  for (auto [k, v] : {std::pair{"save_experiment_best", &st.save_experiment_best},
                      std::pair{"save_trial_best", &st.save_trial_best},
                      std::pair{"save_trial_latest", &st.save_trial_latest}}) {
    s.get(k, *v);
    TS_CHECK(*v >= 0, s.where(s.node()), ": 'checkpoint_storage.", k, "' must be >= 0");
  }
  s.warn_unknown();
}

void parse_scalars(Node& root, ExperimentConfig& c) {
  root.get("name", c.name);
  root.get("description", c.description);
  root.get("entrypoint", c.entrypoint);
  if (root.has("records_per_epoch")) {
    int64_t r = 0;
    root.get("records_per_epoch", r);
    TS_CHECK(r > 0, root.source(), ": 'records_per_epoch' must be > 0, found ", r);
    c.records_per_epoch = r;
  }
  if (root.has("min_validation_period"))
    c.min_validation_period = parse_length(root, "min_validation_period");
  if (root.has("min_checkpoint_period"))
    c.min_checkpoint_period = parse_length(root, "min_checkpoint_period");
  root.get("scheduling_unit", c.scheduling_unit);
  TS_CHECK(c.scheduling_unit > 0, root.source(), ": 'scheduling_unit' must be > 0");
  root.get("perform_initial_validation", c.perform_initial_validation);
  root.get("checkpoint_policy", c.checkpoint_policy);
  TS_CHECK(c.checkpoint_policy == "best" || c.checkpoint_policy == "all" ||
               c.checkpoint_policy == "none",
           root.source(), ": 'checkpoint_policy' is '", c.checkpoint_policy,
           "'; expected best, all or none");
  root.get("max_restarts", c.max_restarts);
  TS_CHECK(c.max_restarts >= 0, root.source(), ": 'max_restarts' must be >= 0");
  if (root.has("resources")) parse_resources(root, c);
  if (root.has("reproducibility")) {
    Node r = root.sub("reproducibility");
    int64_t seed = 0;
    r.get("experiment_seed", seed);
    TS_CHECK(seed >= 0 && seed <= 0xFFFFFFFFLL, r.where(r.node()),
             ": 'reproducibility.experiment_seed' must be in [0, 2^32), found ", seed);
    c.experiment_seed = static_cast<uint64_t>(seed);
    r.warn_unknown();
  }
  if (root.has("data")) c.data = to_json(root.raw("data"), root);
  if (root.has("optimizations")) {
    Node o = root.sub("optimizations");
    o.get("aggregation_frequency", c.aggregation_frequency);
    TS_CHECK(c.aggregation_frequency >= 1, o.where(o.node()),
             ": 'optimizations.aggregation_frequency' must be >= 1");
    o.warn_unknown();
  }
}

ExperimentConfig parse_document(const YAML::Node& doc, const std::string& source);

// yaml-cpp parses nested collections recursively, flow ([[[...]]]) and block (`- - - x`, deeper
// indentation): a file nested past any experiment's needs is refused before it can exhaust the
// stack, and so is one larger than any experiment's.
constexpr size_t kMaxDocumentBytes = 4 << 20;
constexpr size_t kMaxIndent = 256;  // leading spaces and block indicators on one line

void check_nesting(const std::string& text, const std::string& source) {
  TS_CHECK(text.size() <= kMaxDocumentBytes, source, ": ", text.size(),
           " bytes; an experiment file is at most ", kMaxDocumentBytes, " bytes");
  // Names and values end up in JSON (the store, describe, the web view): UTF-8 only.
  if (const auto bad = io::first_invalid_utf8(text))
    fail(source, ": not UTF-8 text (an invalid byte sequence at offset ", *bad, ")");
  int depth = 0, line = 1;
  char quote = 0;
  size_t indent = 0;
  bool line_start = true;
  for (char ch : text) {
    if (line_start && (ch == ' ' || ch == '-' || ch == '?' || ch == ':' || ch == '\t')) {
      TS_CHECK(++indent <= kMaxIndent, source, ":", line, ": indented or nested more than ",
               kMaxIndent, " columns deep");
    } else {
      line_start = false;
    }
    if (ch == '\n') {
      ++line;
      indent = 0;
      line_start = true;
    }
    if (quote) {
      if (ch == quote) quote = 0;
      continue;
    }
    if (ch == '"' || ch == '\'') quote = ch;
    if (ch == '[' || ch == '{') ++depth;
    if (ch == ']' || ch == '}') --depth;
    TS_CHECK(depth <= 64, source, ":", line, ": collections nested more than 64 deep");
  }
}

}  // namespace

ExperimentConfig ExperimentConfig::parse(const std::string& yaml_text, const std::string& source) {
  check_nesting(yaml_text, source);
  auto at = [&](const YAML::Mark& m) {
    return source + (m.is_null() ? "" : ":" + std::to_string(m.line + 1));
  };
  try {
    ExperimentConfig c = parse_document(YAML::Load(yaml_text), source);
    c.sha256 = io::sha256_hex(yaml_text);
    return c;
  } catch (const YAML::ParserException& e) {
    fail(at(e.mark), ": not valid YAML: ", e.msg);
  } catch (const YAML::Exception& e) {
    // A value of a shape no key takes (a list as a map key, ...).
    fail(at(e.mark), ": unexpected value: ", e.msg);
  }
}

namespace {

ExperimentConfig parse_document(const YAML::Node& doc, const std::string& source) {
  ExperimentConfig c;
  WalkBudget budget;
  Node root(doc, "", source, c.warnings, budget);
  parse_scalars(root, c);
  parse_searcher(root, c);
  parse_storage(root, c);
  if (root.has("hyperparameters")) {
    const YAML::Node h = root.raw("hyperparameters");
    TS_CHECK(h.IsMap(), root.where(h), ": 'hyperparameters' must be a map");
    parse_hparams(h, "", root, c.hyperparameters);
  }
  TS_CHECK(c.searcher.max_length.unit != Length::Epochs || c.records_per_epoch, source,
           ": 'searcher.max_length' is in epochs, which needs 'records_per_epoch'");
  // Every length in records fits an int64 (an error now, not a wrapped count later).
  for (const std::optional<Length>& l : {std::optional<Length>(c.searcher.max_length),
                                         c.min_validation_period, c.min_checkpoint_period})
    if (l && (l->unit != Length::Epochs || c.records_per_epoch)) c.batches(*l, 1);
  root.warn_unknown();
  return c;
}

}  // namespace

ExperimentConfig ExperimentConfig::from_file(const std::string& path) {
  ExperimentConfig c = parse(io::read_text_file(path), path);
  c.path = path;
  return c;
}

namespace {
int64_t ceil_div(int64_t a, int64_t b) {
  return a / b + (a % b != 0);
}  // a >= 0, b > 0
}  // namespace

int64_t ExperimentConfig::batches(const Length& length, int64_t global_batch_size) const {
  TS_CHECK(global_batch_size > 0, "experiment: global_batch_size must be > 0");
  switch (length.unit) {
    case Length::Batches:
      return length.value;
    case Length::Records:
      return ceil_div(length.value, global_batch_size);
    case Length::Epochs: {
      TS_CHECK(records_per_epoch, "experiment: a length of ", length.str(),
               " needs 'records_per_epoch'");
      int64_t records = 0;
      TS_CHECK(!__builtin_mul_overflow(length.value, *records_per_epoch, &records),
               "experiment: a length of ", length.str(), " times records_per_epoch ",
               *records_per_epoch, " overflows a 64-bit count of records");
      return ceil_div(records, global_batch_size);
    }
  }
  return 0;
}

const nlohmann::json& ExperimentConfig::constant(const std::string& name) const {
  auto it = hyperparameters.find(name);
  TS_CHECK(it != hyperparameters.end(), "experiment: no hyperparameter '", name, "'");
  TS_CHECK(it->second.type == Hyperparameter::Const, "experiment: hyperparameter '", name,
           "' is searched over, not a constant (the single searcher needs constants)");
  return it->second.val;
}

}  // namespace tessera::trial
