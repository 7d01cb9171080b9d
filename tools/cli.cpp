#include "cli.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "tessera/error.h"
#include "tessera/storage.h"

namespace tessera::cli {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& flags,
           const std::set<std::string>& options) {
  for (int i = first; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flags.count(name) && !inline_value) {
      flags_.insert(name);
    } else if (options.count(name)) {
      if (!inline_value) {
        TS_CHECK(i + 1 < argc, "option --", name, " needs a value");
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      fail("unknown option --", name, " (see --help)");
    }
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Args::get_int(const std::string& name, int64_t fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  try {
    size_t used = 0;
    const int64_t v = std::stoll(it->second, &used);
    TS_CHECK(used == it->second.size(), "");
    return v;
  } catch (...) {
    fail("option --", name, ": expected an integer, got '", it->second, "'");
  }
}

double Args::get_number(const std::string& name, double fallback) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used == it->second.size() && std::isfinite(v)) return v;
  } catch (...) {
  }
  fail("option --", name, ": expected a finite number, got '", it->second, "'");
}

Shape parse_shape(const std::string& text) {
  Shape s;
  std::string cur;
  for (char ch : text + ",") {
    if (ch == ',' || ch == 'x') {
      TS_CHECK(!cur.empty() && cur.find_first_not_of("0123456789") == std::string::npos,
               "invalid shape '", text, "': expected sizes like 512,512,512");
      TS_CHECK(cur.size() <= 12, "invalid shape '", text, "': ", cur, " is too large");
      s.push_back(std::stoll(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  return s;
}

std::optional<double> parse_scaled(const std::string& text, const std::map<char, double>& scales) {
  std::string digits = text;
  double scale = 1;
  if (!digits.empty()) {
    const auto it =
        scales.find(static_cast<char>(std::toupper(static_cast<unsigned char>(digits.back()))));
    if (it != scales.end()) {
      scale = it->second;
      digits.pop_back();
    }
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(digits, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (digits.empty() || used != digits.size()) return std::nullopt;
  return v * scale;
}

double median_ms(const std::function<void()>& f, int iters, int warmup) {
  TS_CHECK(iters > 0, "--iters must be positive, got ", iters);
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double peak_mb(Device device, const std::function<void()>& f) {
  Allocator& memory = allocator_for(device.type);
  memory.reset_peak();
  const int64_t start = memory.stats().allocated;
  f();
  return static_cast<double>(memory.stats().peak_allocated - start) / 1e6;
}

std::string command_output(const std::string& command) {
  std::string reply;
  if (FILE* p = ::popen(command.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) reply += buf;
    ::pclose(p);
  }
  return reply;
}

}  // namespace tessera::cli
