// Tessera's computing processes on this host, so that runs started by hand (which no launcher
// told of each other) still share its cores. Each process holds an exclusive flock on a file of
// its own in one directory per user; a file nobody holds belongs to a process that is gone and is
// removed by the next count. The kernel drops the lock when the process dies, however it dies.
#pragma once

#include <filesystem>

namespace tessera::parallel {

class HostRegistry {
 public:
  // TESSERA_HOST_REGISTRY when set, else /dev/shm/tessera-<uid> (the temporary directory's
  // tessera-<uid> where /dev/shm is missing).
  static std::filesystem::path default_dir();

  // Registers this process in `dir` (created 0700). A directory that cannot be used (not ours,
  // a symbolic link, read-only) leaves the registry inactive: live() is 1 and nothing fails,
  // since sharing cores is an optimisation, never a reason not to train.
  explicit HostRegistry(std::filesystem::path dir);
  ~HostRegistry();
  HostRegistry(const HostRegistry&) = delete;
  HostRegistry& operator=(const HostRegistry&) = delete;

  bool active() const { return fd_ >= 0; }
  // Registered processes alive now, this one included (1 when inactive). Reads at most
  // kMaxEntries names, so a directory flooded with files costs a bounded scan.
  int live() const;

  static constexpr int kMaxEntries = 4096;

 private:
  std::filesystem::path dir_;
  std::filesystem::path file_;
  int fd_ = -1;
};

}  // namespace tessera::parallel
