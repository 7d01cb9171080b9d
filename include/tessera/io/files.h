// File helpers: read-only memory maps, and writes that are atomic (a reader, or a process
// killed mid-write, sees the old file or the new one, never a torn one).
#pragma once
#include <cstddef>
#include <functional>
#include <ostream>
#include <string>

namespace tessera::io {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws naming the path on failure
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// Writes through `write` into PATH.tmp-<pid>, flushes and fsyncs it, renames it over PATH,
// and fsyncs the directory.
void write_file_atomically(const std::string& path,
                           const std::function<void(std::ostream&)>& write);

std::string read_text_file(const std::string& path);

// 'path' for messages. (Built in steps: GCC 12 misreports "'" + s + "'" as an overlapping copy.)
inline std::string quoted(const std::string& path) {
  std::string q;
  q.reserve(path.size() + 2);
  q += '\'';
  q += path;
  q += '\'';
  return q;
}

// Creates `dir` if needed and proves a file can be written in it (and removed); otherwise an
// error naming `what` (the option or config key that gave the path) and the reason.
void check_writable_directory(const std::string& dir, const std::string& what);

}  // namespace tessera::io
