#include "tessera/io/files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/error.h"

namespace tessera::io {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("cannot stat '", path, "': ", std::strerror(errno));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    TS_CHECK(p != MAP_FAILED, "cannot map '", path, "': ", std::strerror(errno));
    data_ = static_cast<const unsigned char*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write) {
  const std::filesystem::path target(path);
  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TS_CHECK(out.good(), "cannot write '", tmp, "': ", std::strerror(errno));
    try {
      write(out);
    } catch (...) {
      out.close();
      std::remove(tmp.c_str());  // the target is untouched
      throw;
    }
    out.flush();
    if (!out.good()) {
      const std::string why = std::strerror(errno);
      out.close();
      std::remove(tmp.c_str());  // a failed write leaves nothing behind (disk full, ...)
      fail("writing '", tmp, "' failed: ", why);
    }
  }
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    std::remove(tmp.c_str());
    fail("cannot fsync '", tmp, "': ", why);
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    fail("cannot rename '", tmp, "' to '", path, "': ", why);
  }
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "cannot open '", path, "': ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void check_writable_directory(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  TS_CHECK(!dir.empty(), what, ": an empty path");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    fail(what, " '", dir, "' is a file, not a directory");
  fs::create_directories(dir, ec);
  TS_CHECK(!ec, what, " '", dir, "': cannot create the directory: ", ec.message());
  const fs::path probe = fs::path(dir) / (".tessera-write-test-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TS_CHECK(fd >= 0, what, " '", dir, "' is not writable: ", std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace tessera::io
