// SIGINT/SIGTERM as a request to stop at the next safe point (a step or batch boundary),
// for the training loops that checkpoint before they exit (engine::TrainLoop, the trial
// harness). A second signal ends the process at once with the default action.
#pragma once
#include <memory>

namespace tessera::engine {

// Installs the handlers for its lifetime and puts the previous ones back, forgetting the signal
// (on = false: does nothing).
class StopSignals {
 public:
  explicit StopSignals(bool on);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct Previous;
  std::unique_ptr<Previous> previous_;  // null when off
};

// The first SIGINT/SIGTERM received while a StopSignals was installed (0: none).
int stop_signal_received();

}  // namespace tessera::engine
