// The thread's open module scopes and the observers told of them.
#include "tessera/nn/module_scope.h"

#include <algorithm>
#include <vector>

namespace tessera::nn {

namespace {
thread_local std::vector<ModuleObserver*> observers;
thread_local std::vector<const Module*> open_modules;
}  // namespace

ModuleScope::ModuleScope(const Module& m) {
  if (observers.empty()) return;
  // A forward reached through operator() and opening its own scope is one call, not two.
  if (!open_modules.empty() && open_modules.back() == &m) return;
  entered_ = &m;
  open_modules.push_back(&m);
  for (ModuleObserver* o : observers) o->module_enter(m);
}

ModuleScope::~ModuleScope() {
  if (!entered_) return;
  for (ModuleObserver* o : observers) o->module_exit(*entered_);
  open_modules.pop_back();
}

void add_module_observer(ModuleObserver& observer) {
  observers.push_back(&observer);
}

void remove_module_observer(ModuleObserver& observer) {
  observers.erase(std::remove(observers.begin(), observers.end(), &observer), observers.end());
}

}  // namespace tessera::nn
