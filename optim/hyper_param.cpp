#include "tessera/optim/hyper_param.h"

#include <sstream>

#include "tessera/error.h"

namespace tessera::optim {

std::string hyper_param_kind_text(const HyperParam& param) {
  using K = HyperParamKind;
  switch (param.kind) {
    case K::Lr:
      return "lr >= 0";
    case K::Ratio:
      return "ratio >= 0";
    case K::Rate:
      return "rate >= 0";
    case K::Steps:
      return "steps >= 1";
    case K::Count:
      return "integer >= 0";
    case K::Bool:
      return "true/false";
    case K::Momentum:
      return "in [0, 1)";
    case K::Positive:
      return "> 0";
    case K::NonNegative:
      return ">= 0";
    case K::Betas:
      return "two in [0, 1)";
    case K::Choice: {
      std::string out;
      for (size_t i = 0; i < param.choices.size(); ++i)
        out += (i == 0 ? "" : i + 1 == param.choices.size() ? " or " : ", ") + param.choices[i];
      return out;
    }
  }
  return "";
}

std::string hyper_param_default_text(const HyperParam& param) {
  if (param.required) return "required";
  const std::vector<double>& d = param.default_value;
  if (d.empty()) return "see doc";
  if (param.kind == HyperParamKind::Bool) return d[0] != 0 ? "true" : "false";
  if (param.kind == HyperParamKind::Choice) return param.choices.at(static_cast<size_t>(d[0]));
  std::ostringstream s;
  if (d.size() > 1) s << "[";
  for (size_t i = 0; i < d.size(); ++i) s << (i ? ", " : "") << d[i];
  if (d.size() > 1) s << "]";
  return s.str();
}

const HyperParam* find_hyper_param(const std::vector<HyperParam>& params, const std::string& name) {
  for (const HyperParam& p : params)
    if (p.name == name) return &p;
  return nullptr;
}

HyperParamValues::HyperParamValues(std::string section, std::string type,
                                   const std::vector<HyperParam>& params, HyperParamGiven given)
    : section_(std::move(section)),
      type_(std::move(type)),
      params_(params),
      given_(std::move(given)) {}

const std::vector<double>& HyperParamValues::values(const std::string& name) const {
  if (auto it = given_.find(name); it != given_.end()) return it->second;
  const HyperParam* p = find_hyper_param(params_, name);
  TS_CHECK(p, section_, " type ", type_, " has no parameter '", name, "'");
  return p->default_value;
}

double HyperParamValues::number(const std::string& name, std::optional<double> fallback) const {
  const std::vector<double>& v = values(name);
  if (!v.empty()) return v[0];
  TS_CHECK(fallback, "'", section_, ".params.", name, "' is required by ", type_);
  return *fallback;
}

std::pair<double, double> HyperParamValues::pair(const std::string& name) const {
  const std::vector<double>& v = values(name);
  TS_CHECK(v.size() == 2, "'", section_, ".params.", name, "' of ", type_, " must be two numbers");
  return {v[0], v[1]};
}

const std::string& HyperParamValues::choice(const std::string& name) const {
  const HyperParam* p = find_hyper_param(params_, name);
  TS_CHECK(p && p->kind == HyperParamKind::Choice, section_, " type ", type_,
           " has no named parameter '", name, "'");
  const auto i = static_cast<size_t>(number(name));
  TS_CHECK(i < p->choices.size(), "'", section_, ".params.", name, "' of ", type_, ": choice ", i,
           " of ", p->choices.size());
  return p->choices[i];
}

}  // namespace tessera::optim
