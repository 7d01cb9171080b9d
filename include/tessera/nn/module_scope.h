// ModuleScope: marks the code that runs inside one module's forward, so that whatever watches
// modules (the flops profiler) attributes the kernels run there to that module. Costs one
// thread-local check when nothing watches.
//
// UnaryModule's operator() opens one, and the built-in models open one in each forward they
// call directly. A module of your own whose forward is not reached through operator() opens
// one at its top, or its kernels count towards the nearest enclosing module that did:
//
//   Tensor Block::forward(const Tensor& x, const Tensor& mask) {
//     nn::ModuleScope scope(*this);
//     ...
//   }
#pragma once
#include "tessera/nn/module.h"

namespace tessera::nn {

class ModuleObserver {
 public:
  virtual ~ModuleObserver() = default;
  virtual void module_enter(const Module& m) = 0;
  virtual void module_exit(const Module& m) = 0;
};

class ModuleScope {
 public:
  explicit ModuleScope(const Module& m);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  const Module* entered_ = nullptr;  // null when nothing watched or the module was already open
};

// Installs an observer on this thread until destroyed (or `remove`d by whoever installed it).
void add_module_observer(ModuleObserver& observer);
void remove_module_observer(ModuleObserver& observer);

}  // namespace tessera::nn
