#include "tessera/nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>
#include <typeinfo>

#include "tessera/grad_mode.h"
#include "tessera/ops.h"

namespace tessera::nn {

std::string Module::type_name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  // Without namespaces or enclosing classes ("tessera::models::BertLayer::Output" -> "Output").
  const size_t template_start = name.find('<');
  const size_t last = name.rfind("::", template_start);
  return last == std::string::npos ? name : name.substr(last + 2);
}

Module::Module(Module* parent, std::string name) : name_(std::move(name)) {
  TS_CHECK(parent != nullptr, "Module '", name_, "': parent must not be null");
  parent->register_child(name_, this);
}

void Module::register_child(const std::string& name, Module* child) {
  TS_CHECK(!name.empty() && name.find('.') == std::string::npos, "Module: invalid child name '",
           name, "' (names are non-empty and have no dots)");
  for (auto& [n, c] : children_) TS_CHECK(n != name, "Module: duplicate child name '", name, "'");
  children_.emplace_back(name, child);
}

Tensor& Module::register_parameter(const std::string& name, Tensor* slot, Tensor value) {
  for (auto& [n, p] : params_) TS_CHECK(n != name, "Module: duplicate parameter name '", name, "'");
  TS_CHECK(is_floating(value.dtype()), "Module: parameter '", name, "' must be floating, got ",
           value.describe());
  *slot = value.detach().requires_grad_(true);
  params_.emplace_back(name, slot);
  return *slot;
}

Tensor& Module::register_buffer(const std::string& name, Tensor* slot, Tensor value,
                                bool persistent) {
  *slot = value.detach();
  buffers_.push_back({name, slot, persistent});
  return *slot;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Tensor*>> out = params_;
  for (auto& [cname, child] : children_)
    for (auto& [n, t] : child->named_parameters()) out.emplace_back(cname + "." + n, t);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers(bool persistent_only) {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& b : buffers_)
    if (b.persistent || !persistent_only) out.emplace_back(b.name, b.slot);
  for (auto& [cname, child] : children_)
    for (auto& [n, t] : child->named_buffers(persistent_only)) out.emplace_back(cname + "." + n, t);
  return out;
}

std::vector<Tensor> Module::parameters() {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(*t);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  return children_;
}

int64_t Module::num_parameters() {
  // A tensor shared by two names (tied weights) counts once.
  std::set<const void*> seen;
  int64_t n = 0;
  for (auto& [name, t] : named_parameters())
    if (seen.insert(t->impl()).second) n += t->numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& [n, t] : named_parameters()) *t = t->to(device).detach().requires_grad_(true);
  for (auto& [n, t] : named_buffers()) *t = t->to(device);
}

void Module::to(DType dtype) {
  NoGradGuard no_grad;
  for (auto& [n, t] : named_parameters()) *t = t->to(dtype).detach().requires_grad_(true);
  for (auto& [n, t] : named_buffers())
    if (is_floating(t->dtype())) *t = t->to(dtype);
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t->set_grad(Tensor());
}

std::map<std::string, Tensor> Module::state_dict() {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : named_parameters()) out[n] = t->detach();
  for (auto& [n, t] : named_buffers(true)) out[n] = t->detach();
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  std::vector<std::pair<std::string, Tensor*>> slots = named_parameters();
  for (auto& b : named_buffers(true)) slots.push_back(b);
  std::vector<std::string> missing, unexpected;
  std::set<std::string> known;
  for (auto& [name, slot] : slots) {
    known.insert(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(name);
      continue;
    }
    TS_CHECK(it->second.shape() == slot->shape(), "load_state_dict: '", name, "' has shape ",
             shape_str(it->second.shape()), " in the state dict but ", shape_str(slot->shape()),
             " in the model");
    // Integers are not silently cast into floating weights (or the reverse).
    TS_CHECK(is_floating(it->second.dtype()) == is_floating(slot->dtype()), "load_state_dict: '",
             name, "' is ", dtype_name(it->second.dtype()), " in the state dict but ",
             dtype_name(slot->dtype()), " in the model");
  }
  for (auto& [name, t] : state)
    if (!known.count(name)) unexpected.push_back(name);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::ostringstream os;
    os << "load_state_dict: ";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      os << what << " (" << keys.size() << "): ";
      for (size_t i = 0; i < keys.size() && i < 20; ++i) os << (i ? ", " : "") << keys[i];
      if (keys.size() > 20) os << ", ...";
      os << ". ";
    };
    list("missing keys", missing);
    list("unexpected keys", unexpected);
    throw Error(os.str());
  }
  NoGradGuard no_grad;
  for (auto& [name, slot] : slots) {
    auto it = state.find(name);
    if (it != state.end()) slot->copy_(it->second);
  }
}

std::string Module::summary() {
  std::ostringstream os;
  for (auto& [n, t] : named_parameters())
    os << "  " << n << "  " << dtype_name(t->dtype()) << shape_str(t->shape()) << "  " << t->numel()
       << "\n";
  os << type_name() << ": " << num_parameters() << " parameters\n";
  return os.str();
}

Parameter::Parameter(Module* owner, const std::string& name, Tensor init) {
  owner->register_parameter(name, &value_, std::move(init));
}

}  // namespace tessera::nn
