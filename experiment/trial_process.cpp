#include "tessera/experiment/trial_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/error.h"

namespace tessera::experiment {

std::string ExitStatus::str() const {
  if (signal != 0)
    return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit code " + std::to_string(code);
}

namespace {

// In the child, before exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const std::vector<char*>& argv, int log_fd, int input_fd,
                             pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);  // the runner died before prctl took effect
  dup2(input_fd, STDIN_FILENO);
  dup2(log_fd, STDOUT_FILENO);
  dup2(log_fd, STDERR_FILENO);
  // The runner ignores nothing the trial needs: default dispositions for the stop signals.
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  execvp(argv[0], argv.data());
  const char* why = strerror(errno);
  const char* head = "experiment runner: cannot start the trial: ";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, head, strlen(head));
  n = write(STDERR_FILENO, argv[0], strlen(argv[0]));
  n = write(STDERR_FILENO, ": ", 2);
  n = write(STDERR_FILENO, why, strlen(why));
  n = write(STDERR_FILENO, "\n", 1);
  _exit(127);
}

}  // namespace

TrialProcess::TrialProcess(const std::vector<std::string>& argv, const std::string& log_path) {
  TS_CHECK(!argv.empty(), "TrialProcess: no command");
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  TS_CHECK(log_fd >= 0, "cannot open the trial log '", log_path, "': ", std::strerror(errno));
  std::vector<std::string> args = argv;  // (stable storage for the char pointers)
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    close(log_fd);
    fail("cannot make a pipe for the trial: ", std::strerror(errno));
  }
  signal(SIGPIPE, SIG_IGN);  // a trial that exited: send() returns false instead
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) exec_child(cargs, log_fd, pipe_fds[0], parent);
  const int fork_errno = errno;
  close(log_fd);
  close(pipe_fds[0]);
  input_ = pipe_fds[1];
  TS_CHECK(pid_ > 0, "cannot start the trial '", argv[0], "': ", std::strerror(fork_errno));
  setpgid(pid_, pid_);  // also from the parent: no race with the first kill()
}

bool TrialProcess::send(const std::string& line) {
  if (input_ < 0) return false;
  const std::string text = line + "\n";
  return write(input_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

TrialProcess::~TrialProcess() {
  if (input_ >= 0) close(input_);
  if (pid_ > 0 && !exit_) {
    kill();
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

std::optional<ExitStatus> TrialProcess::poll() {
  if (exit_ || pid_ <= 0) return exit_;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return std::nullopt;
  ExitStatus e;
  if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  exit_ = e;
  return exit_;
}

void TrialProcess::request_stop() {
  if (pid_ > 0 && !exit_) ::kill(pid_, SIGTERM);
}

void TrialProcess::kill() {
  if (pid_ <= 0 || exit_) return;
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
}

}  // namespace tessera::experiment
