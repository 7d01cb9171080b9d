// Identities that name things on disk: random UUIDs (experiments, checkpoints), SHA-256
// digests (what produced a checkpoint), and names made safe as one path component (a name
// from a config never walks out of the directory it is put in).
#pragma once
#include <string>

namespace tessera::io {

// A random version-4 UUID, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx".
std::string new_uuid();

// The SHA-256 of `bytes` as 64 lowercase hex digits (OpenSSL's libcrypto).
std::string sha256_hex(const std::string& bytes);

// `name` as one file name: letters, digits, '.', '_' and '-' stay; every other byte (a '/', a
// space, UTF-8) becomes %XX, and so does a leading '.', so the result is never "", "." or
// "..", never hidden, and never holds a separator. Empty gives `fallback`.
std::string path_component(const std::string& name, const std::string& fallback);

}  // namespace tessera::io
