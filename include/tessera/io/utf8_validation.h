// Whether bytes are valid UTF-8 (through utf8proc): configs, names and corpora are checked once
// where they enter, so that no later JSON dump or tokenizer meets an invalid sequence.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace tessera::io {

// The offset of the first invalid UTF-8 sequence in `text`, or nullopt when it is all valid.
std::optional<size_t> first_invalid_utf8(std::string_view text);

}  // namespace tessera::io
