// Reading one object of a training config: typed values with errors that name the key, the
// value found and what was expected; keys never asked for are reported as unknown, and keys
// read but not acted on as ignored. io's config reader uses it for its own sections and hands
// it to the parsers of the sections higher layers own (io/config_section_registry.h).
#pragma once
#include <cmath>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tessera/error.h"
#include "tessera/io/closest_name.h"
#include "tessera/io/config_key.h"

namespace tessera::io::config {

using json = nlohmann::json;

class Section {
 public:
  // `unknown` collects the keys nobody asked for (their full paths, with a suggestion), which
  // a strict config refuses; `recorder`, when given, notes every key asked for (the config
  // reference: config_key.h).
  Section(const json& j, std::string path, const std::string& source,
          std::vector<std::string>& warnings, std::vector<std::string>& unknown,
          ConfigKeyRecorder* recorder = nullptr)
      : j_(j),
        path_(std::move(path)),
        source_(source),
        warnings_(warnings),
        unknown_(unknown),
        recorder_(recorder) {
    TS_CHECK(j.is_object(), source_, ": '", path_, "' must be an object, found ", j.dump());
  }

  const std::string& source() const { return source_; }
  std::vector<std::string>& warnings() { return warnings_; }
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }
  // The keys the object states (non-null), in its order.
  std::vector<std::string> stated_keys() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : j_.items())
      if (!v.is_null()) out.push_back(k);
    return out;
  }
  bool has(const std::string& k) {
    seen_.insert(k);
    if (recorder_) recorder_->asked(key(k));
    return j_.contains(k) && !j_[k].is_null();
  }

  template <class T>
  void get(const std::string& k, T& out) {
    if (recorder_) recorder_->read(key(k), kind_name<T>(), value_text(out));
    if (!has(k)) return;
    const json& v = j_[k];
    if constexpr (std::is_same_v<T, bool>) {
      TS_CHECK(v.is_boolean(), source_, ": '", key(k), "' must be true or false, found ", v.dump());
      out = v.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      const bool integral = v.is_number_integer() ||
                            (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
      TS_CHECK(integral, source_, ": '", key(k), "' must be an integer, found ", v.dump());
      const double d = v.get<double>();
      // Values past int64 would wrap; nobody means them.
      TS_CHECK(std::fabs(d) < 9.2e18, source_, ": '", key(k), "' is ", v.dump(),
               ", out of range for an integer");
      out = v.is_number_unsigned()  ? static_cast<T>(v.get<uint64_t>())
            : v.is_number_integer() ? static_cast<T>(v.get<int64_t>())
                                    : static_cast<T>(d);
    } else if constexpr (std::is_floating_point_v<T>) {
      TS_CHECK(v.is_number(), source_, ": '", key(k), "' must be a number, found ", v.dump());
      out = v.get<double>();
    } else {
      TS_CHECK(v.is_string(), source_, ": '", key(k), "' must be a string, found ", v.dump());
      out = v.get<std::string>();
    }
  }

  template <class T>
  void get_min(const std::string& k, T& out, T min, const char* expect) {
    get(k, out);
    if (recorder_) recorder_->expected(key(k), expect);
    if (has(k))
      TS_CHECK(out >= min, source_, ": '", key(k), "' is ", j_[k].dump(), ", expected ", expect);
  }

  // A list of integers >= 0 at `k`, at least `least` of them (absent: empty); anything else is
  // an error "'key' is FOUND, expected EXPECTED".
  std::vector<int64_t> non_negative_integers(const std::string& k, size_t least,
                                             const std::string& expected) {
    const json& v = raw(k, "list of integers");
    std::vector<int64_t> out;
    if (v.is_null()) return out;
    bool ok = v.is_array() && v.size() >= least;
    for (const auto& e : v) ok = ok && e.is_number_integer() && e.get<int64_t>() >= 0;
    TS_CHECK(ok, source_, ": '", key(k), "' is ", v.dump(), ", expected ", expected);
    for (const auto& e : v) out.push_back(e.get<int64_t>());
    return out;
  }

  Section sub(const std::string& k) {
    seen_.insert(k);
    if (recorder_) recorder_->section(key(k));
    static const json empty = json::object();
    return Section(has(k) ? j_[k] : empty, key(k), source_, warnings_, unknown_, recorder_);
  }
  // The value as stated (null when absent), for keys of more than one shape; `kind` and
  // `default_text` describe it in the config reference.
  const json& raw(const std::string& k, const char* kind = "JSON value",
                  const std::string& default_text = "") {
    seen_.insert(k);
    if (recorder_) recorder_->read(key(k), kind, default_text);
    static const json null;
    return j_.contains(k) ? j_[k] : null;
  }

  // A rule on a value read: when `ok` is false, an error "'key' is FOUND, expected EXPECTED"
  // (a string found is quoted). `expected` is also what the config reference says of the key.
  template <class V>
  void expect(const std::string& k, bool ok, const V& found, const std::string& expected) {
    if (recorder_) recorder_->expected(key(k), expected);
    if (ok) return;
    if constexpr (std::is_same_v<V, json>)  // (as written in the file)
      fail(source_, ": '", key(k), "' is ", found.dump(), ", expected ", expected);
    else if constexpr (std::is_convertible_v<V, std::string>)
      fail(source_, ": '", key(k), "' is \"", std::string(found), "\", expected ", expected);
    else
      fail(source_, ": '", key(k), "' is ", found, ", expected ", expected);
  }

  // A DeepSpeed key Tessera reads (its type is checked) but does not act on: warned about, as
  // unknown keys are, with the reason.
  template <class T>
  void ignored(const std::string& k, const char* why) {
    if (recorder_) {  // (no default: Tessera keeps none)
      recorder_->read(key(k), kind_name<T>(), "");
      recorder_->note(key(k), std::string("no effect in Tessera: ") + why);
    }
    if (!has(k)) return;
    T v{};
    get(k, v);
    warnings_.push_back(source_ + ": '" + key(k) + "' has no effect in Tessera (ignored): " + why);
  }

  // A DeepSpeed key Tessera cannot honour: stating it is an error naming it, with the reason.
  void refused(const std::string& k, const char* why) {
    seen_.insert(k);
    if (recorder_) {  // (the reference lists it, with why)
      recorder_->read(key(k), "JSON value", "");
      recorder_->note(key(k), std::string("refused by Tessera: ") + why);
      return;
    }
    TS_CHECK(!has(k), source_, ": '", key(k), "' is not supported: ", why);
  }

  // The config reference's line for `k` ("": this section itself) beside its kind and
  // default: what it does (and what 0 or "" means).
  void note(const std::string& k, const std::string& text) {
    if (recorder_) recorder_->note(k.empty() ? path_ : key(k), text);
  }
  // The lines of several keys at once, before or after reading them.
  void notes(std::initializer_list<std::pair<const char*, const char*>> lines) {
    for (const auto& line : lines) note(line.first, line.second);
  }

  // Keys present but never asked for, each with the known key it most likely meant.
  void warn_unknown() {
    const std::vector<std::string> known(seen_.begin(), seen_.end());
    for (auto& [k, v] : j_.items()) {
      if (seen_.count(k) || k.rfind("_", 0) == 0) continue;  // "_comment" style keys are notes
      const auto guess = closest_name(k, known);
      const std::string hint = guess ? " (did you mean '" + key(*guess) + "'?)" : "";
      unknown_.push_back("'" + key(k) + "'" + hint);
      warnings_.push_back(source_ + ": unknown key '" + key(k) + "' (ignored)" + hint);
    }
  }

 private:
  template <class T>
  static const char* kind_name() {
    if constexpr (std::is_same_v<T, bool>) return "true/false";
    if constexpr (std::is_integral_v<T>) return "integer";
    if constexpr (std::is_floating_point_v<T>) return "number";
    return "string";
  }
  template <class T>
  static std::string value_text(const T& v) {
    if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
    if constexpr (std::is_arithmetic_v<T>) {
      std::ostringstream os;
      os << v;
      return os.str();
    }
    if constexpr (!std::is_arithmetic_v<T>) return json(v).dump();
  }

  const json& j_;
  std::string path_;
  const std::string& source_;
  std::vector<std::string>& warnings_;
  std::vector<std::string>& unknown_;
  ConfigKeyRecorder* recorder_;
  std::set<std::string> seen_;
};

}  // namespace tessera::io::config
