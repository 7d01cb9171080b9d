// Shared by the fuzz targets: the fuzzer's bytes as a file (the parsers read files), and the
// rule every target checks: bad input may throw tessera::Error, nothing else.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessera::fuzz {

// A per-process scratch directory under /dev/shm (or /tmp), made once and removed when the
// fuzzer exits (libFuzzer ends a timed run with exit(), which runs this destructor).
class ScratchDir {
 public:
  ScratchDir() {
    const std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path_ = base + "/tessera-fuzz-" + std::to_string(getpid());
    std::error_code ec;
    std::filesystem::create_directories(path_, ec);
    if (ec) std::abort();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline const std::string& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

inline std::string write_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size) std::fwrite(data, 1, size, f);
  std::fclose(f);
  return path;
}

}  // namespace tessera::fuzz
