// GPT-2's pre-tokenisation of ASCII text without the regex engine (private to io/). PCRE2 runs
// the pattern by interpretation (JIT is not allowed here) and was half of encoding time; most
// text is ASCII, where the pattern's pieces follow from a byte's class alone. This decides a
// piece only when every byte it looks at, the one that ends the piece included, is in the
// classes below; anything else (a control byte, any non-ASCII byte) is left to PCRE2, so the
// pieces are always the pattern's (checked against PCRE2 on random text in the tests).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera::io::gpt2_ascii {

enum Class : uint8_t { kOther, kLetter, kDigit, kSpace, kPunct };

// [A-Za-z], [0-9], the six ASCII \s bytes, the other printable bytes; kOther for the rest.
inline Class class_of(unsigned char c) {
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return kLetter;
  if (c >= '0' && c <= '9') return kDigit;
  if (c == ' ' || (c >= '\t' && c <= '\r')) return kSpace;
  if (c > ' ' && c < 0x7f) return kPunct;
  return kOther;
}

// The end of the piece starting at `at` (< text.size()), or 0 when the bytes do not decide it.
inline size_t piece_end(std::string_view text, size_t at) {
  const size_t n = text.size();
  auto cls = [&](size_t i) {
    return i < n ? class_of(static_cast<unsigned char>(text[i])) : kOther;
  };
  const char c = text[at];
  if (c == '\'') {  // 's|'t|'re|'ve|'m|'ll|'d, in this order
    const char a = at + 1 < n ? text[at + 1] : 0, b = at + 2 < n ? text[at + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return at + 2;
    if ((a == 'r' || a == 'v') && b == 'e') return at + 3;
    if (a == 'l' && b == 'l') return at + 3;
  }
  Class first = cls(at);
  size_t i = at;
  if (c == ' ') {  // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+` take a leading space
    const Class next = cls(at + 1);
    if (next == kLetter || next == kDigit || next == kPunct) {
      first = next;
      i = at + 1;
    } else if (at + 1 < n && next == kOther) {
      return 0;
    }
  }
  if (first == kLetter || first == kDigit || first == kPunct) {
    while (cls(i) == first) ++i;
    // A non-ASCII or control byte might continue the run (é is \p{L}): undecided.
    return i < n && cls(i) == kOther ? 0 : i;
  }
  if (first != kSpace) return 0;
  // `\s+(?!\S)|\s+`: a run of spaces leaves its last one to the word that follows.
  while (cls(i) == kSpace) ++i;
  if (i == n) return i;
  if (cls(i) == kOther) return 0;  // might be a Unicode space continuing the run
  return i - at >= 2 ? i - 1 : i;
}

}  // namespace tessera::io::gpt2_ascii
