// The storage every registry of an extension point shares (models, optimizers, LR schedules,
// pipeline schedules, searchers): entries named by their `type` (the config's name for them),
// kept in registration order. A deque, so that a reference handed out stays valid while others
// are registered; a mutex, so that registering from static initialisers and reading from
// threads are safe.
#pragma once
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/error.h"

namespace tessera {

template <class Entry>
class NamedRegistry {
 public:
  // `what` names an entry's kind in messages ("optimizer type", "scheduler type").
  NamedRegistry(std::string what, std::vector<Entry> builtin) : what_(std::move(what)) {
    for (Entry& e : builtin) entries_.push_back(std::move(e));
  }

  // The entry of `type`; an unknown one is an error listing the registered types.
  const Entry& find(const std::string& type) const {
    if (const Entry* e = find_if_registered(type)) return *e;
    fail(what_, " \"", type, "\" is not registered (registered: ", list(), ")");
  }
  const Entry* find_if_registered(const std::string& type) const {
    std::lock_guard lock(mutex_);
    for (const Entry& e : entries_)
      if (e.type == type) return &e;
    return nullptr;
  }
  bool has(const std::string& type) const { return find_if_registered(type) != nullptr; }
  std::vector<std::string> types() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const Entry& e : entries_) out.push_back(e.type);
    return out;
  }
  // "A, B, C": the registered types for messages (each after `prefix`).
  std::string list(const std::string& prefix = "", const std::string& separator = ", ") const {
    std::string out;
    for (const std::string& t : types()) out += (out.empty() ? "" : separator) + prefix + t;
    return out;
  }
  // Refuses an entry `add` would refuse (no type, no build function, a type registered twice),
  // so that a registry which also publishes its entry to a lower layer checks before it does.
  // `caller` names the registering function in errors.
  void check_new(const Entry& entry, const char* caller) const {
    TS_CHECK(!entry.type.empty(), caller, ": an entry needs a type");
    if constexpr (requires { entry.build; })
      TS_CHECK(static_cast<bool>(entry.build), caller, ": '", entry.type,
               "' needs a build function");
    TS_CHECK(!has(entry.type), caller, ": '", entry.type, "' is registered twice");
  }
  void add(Entry entry, const char* caller) {
    check_new(entry, caller);
    std::lock_guard lock(mutex_);
    entries_.push_back(std::move(entry));
  }

 private:
  std::string what_;
  mutable std::mutex mutex_;
  std::deque<Entry> entries_;
};

}  // namespace tessera
