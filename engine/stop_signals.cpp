#include "tessera/engine/stop_signals.h"

#include <atomic>
#include <csignal>

namespace tessera::engine {

namespace {

std::atomic<int> g_stop_signal{0};

extern "C" void on_stop_signal(int sig) {
  if (g_stop_signal.exchange(sig) != 0) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

struct StopSignals::Previous {
  struct sigaction int_action = {}, term_action = {};
};

StopSignals::StopSignals(bool on) {
  if (!on) return;
  previous_ = std::make_unique<Previous>();
  g_stop_signal = 0;
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &previous_->int_action);
  sigaction(SIGTERM, &sa, &previous_->term_action);
}

StopSignals::~StopSignals() {
  if (!previous_) return;
  sigaction(SIGINT, &previous_->int_action, nullptr);
  sigaction(SIGTERM, &previous_->term_action, nullptr);
  g_stop_signal = 0;  // handled (or ignored) by whoever installed these
}

int stop_signal_received() {
  return g_stop_signal.load();
}

}  // namespace tessera::engine
