#include "tessera/io/token_windows.h"

#include "tessera/error.h"

namespace tessera::io {

TokenWindows::TokenWindows(const TokenFile& tokens, int64_t block, const std::string& what)
    : tokens_(tokens), block_(block), windows_(0) {
  TS_CHECK(block >= 1, "token windows: block size ", block, " < 1");
  TS_CHECK(tokens.size() >= block + 1, what, " has ", tokens.size(),
           " tokens, fewer than one window of block_size + 1 = ", block + 1,
           "; use more text or a smaller model.block_size");
  windows_ = (tokens.size() - 1) / block;
}

TokenWindow TokenWindows::get(int64_t index) const {
  TS_CHECK(index >= 0 && index < windows_, "token windows: index ", index, " out of [0, ", windows_,
           ")");
  const int32_t* start = tokens_.data() + index * block_;
  return TokenWindow(start, start + block_ + 1);
}

std::pair<Tensor, Tensor> TokenWindows::collate(const std::vector<TokenWindow>& windows) {
  TS_CHECK(!windows.empty(), "token windows: an empty batch");
  const int64_t rows = static_cast<int64_t>(windows.size());
  const int64_t block = static_cast<int64_t>(windows[0].size()) - 1;
  Tensor x = Tensor::empty({rows, block}, DType::Int64),
         y = Tensor::empty({rows, block}, DType::Int64);
  int64_t* px = x.data<int64_t>();
  int64_t* py = y.data<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const TokenWindow& w = windows[static_cast<size_t>(r)];
    TS_CHECK(static_cast<int64_t>(w.size()) == block + 1, "token windows: window ", r, " has ",
             w.size(), " tokens, expected ", block + 1);
    for (int64_t i = 0; i < block; ++i) {
      px[r * block + i] = w[static_cast<size_t>(i)];
      py[r * block + i] = w[static_cast<size_t>(i + 1)];
    }
  }
  return {x, y};
}

}  // namespace tessera::io
