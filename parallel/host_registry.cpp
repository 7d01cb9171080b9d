#include "tessera/parallel/host_registry.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <system_error>

namespace tessera::parallel {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "process-";

// Ours, a real directory, and no one else may write it: anything else could be a trap laid by
// another user (a link into our files, or a directory where they could plant or delete entries).
bool usable_directory(const fs::path& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return false;
  struct stat st {};
  return lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
         (st.st_mode & 0022) == 0;
}

// Held by a live process: its exclusive lock refuses ours.
bool held(const fs::path& file) {
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool locked = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return locked;
}

}  // namespace

fs::path HostRegistry::default_dir() {
  if (const char* dir = std::getenv("TESSERA_HOST_REGISTRY"); dir && *dir) return dir;
  const std::string name = "tessera-" + std::to_string(geteuid());
  std::error_code ec;
  if (fs::is_directory("/dev/shm", ec)) return fs::path("/dev/shm") / name;
  return fs::temp_directory_path(ec) / name;
}

HostRegistry::HostRegistry(fs::path dir) : dir_(std::move(dir)) {
  if (!usable_directory(dir_)) return;
  // The pid and the start time: a later process given the same pid gets another name, so a
  // counter removing the dead one's file cannot remove the newcomer's.
  const std::string pid =
      std::to_string(getpid()) + "-" +
      std::to_string(std::chrono::system_clock::now().time_since_epoch().count());
  // Locked before it gets the name counters read, so no counter can take it for a dead one.
  const fs::path draft = dir_ / (".draft-" + pid);
  const int fd = open(draft.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  file_ = dir_ / (kPrefix + pid);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0 || rename(draft.c_str(), file_.c_str()) != 0) {
    unlink(draft.c_str());
    close(fd);
    return;
  }
  fd_ = fd;
}

HostRegistry::~HostRegistry() {
  if (fd_ < 0) return;
  unlink(file_.c_str());
  close(fd_);
}

int HostRegistry::live() const {
  if (fd_ < 0) return 1;
  int alive = 0, seen = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end && seen < kMaxEntries;
       it.increment(ec), ++seen) {
    const fs::path& file = it->path();
    if (file.filename().string().rfind(kPrefix, 0) != 0) continue;
    if (held(file)) {
      ++alive;
    } else {
      std::error_code ignored;
      fs::remove(file, ignored);  // its process is gone
    }
  }
  return std::max(alive, 1);
}

}  // namespace tessera::parallel
