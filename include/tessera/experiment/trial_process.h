// One trial run as a child process of the experiment runner: its stdout and stderr appended to
// the trial's log, its stdin a pipe from the runner (send(): the searcher's answers), in a
// process group of its own, and sent SIGTERM if the runner dies (so a killed runner's trials
// checkpoint and stop instead of running on unsupervised). File descriptors the runner marked
// inheritable (its experiment lock) stay open in the child, so the lock is held while any trial
// runs.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace tessera::experiment {

struct ExitStatus {
  int code = 0;    // the exit code when it exited
  int signal = 0;  // the signal that ended it, else 0
  bool ok() const { return code == 0 && signal == 0; }
  std::string str() const;  // "exit code 3", "killed by signal 9 (Killed)"
};

class TrialProcess {
 public:
  // Starts argv[0] (looked up in PATH) with argv; an argv[0] that cannot run makes the child
  // exit 127 with the reason in the log.
  TrialProcess(const std::vector<std::string>& argv, const std::string& log_path);
  ~TrialProcess();  // a child still running is killed (its whole group) and reaped
  TrialProcess(const TrialProcess&) = delete;
  TrialProcess& operator=(const TrialProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Its exit, once it has happened (reaped then); nullopt while it runs.
  std::optional<ExitStatus> poll();
  // A line to the child's stdin; false when it no longer reads (exited).
  bool send(const std::string& line);
  // SIGTERM: a trial checkpoints at its next batch boundary and exits.
  void request_stop();
  // SIGKILL to the process group (mpirun's ranks included).
  void kill();

 private:
  pid_t pid_ = -1;
  int input_ = -1;  // the write end of the child's stdin
  std::optional<ExitStatus> exit_;
};

}  // namespace tessera::experiment
