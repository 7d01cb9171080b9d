// Tessera's exception type and the check macros that build its messages.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... Rest>
void append(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append(os, rest...);
}
}  // namespace detail

template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  detail::append(os, args...);
  throw Error(os.str());
}

}  // namespace tessera

// TS_CHECK(cond, "op: expected ... got ", x): throws tessera::Error with the message.
#define TS_CHECK(cond, ...)                    \
  do {                                         \
    if (!(cond)) ::tessera::fail(__VA_ARGS__); \
  } while (0)
