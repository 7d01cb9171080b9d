#include "tessera/parallel/tensor_parallel_layout.h"

#include "tessera/grad_mode.h"
#include "tessera/io/json_fields.h"
#include "tessera/ops.h"

namespace tessera::parallel {

namespace {

void collect(nn::Module& m, const std::string& prefix, TensorParallelLayout& out) {
  if (const auto* tp = dynamic_cast<const TensorParallelModule*>(&m))
    for (const auto& [name, split] : tp->tensor_parallel_splits()) out[prefix + name] = split;
  for (auto& [name, child] : m.named_children()) collect(*child, prefix + name + ".", out);
}

// The layout entry a state key belongs to: the parameter's own ("<param>") or, for optimizer
// state ("<param>.<slot>", slots have no dot), its parameter's; null when replicated.
const TensorParallelSplit* split_of(const TensorParallelLayout& layout, const std::string& key) {
  if (auto it = layout.find(key); it != layout.end()) return &it->second;
  const size_t dot = key.rfind('.');
  if (dot == std::string::npos) return nullptr;
  auto it = layout.find(key.substr(0, dot));
  return it == layout.end() ? nullptr : &it->second;
}

// A rank's length along the split dimension: a padded 1/N, or 1/N of each fused block.
int64_t per_rank(const TensorParallelSplit& s, int size) {
  return s.stride == 1 ? (s.size + size - 1) / size : s.size / size;
}

void check_split(const Tensor& t, const TensorParallelSplit& s, int size) {
  TS_CHECK(s.dim >= 0 && s.dim < t.dim() && s.stride >= 1 && s.size >= 1,
           "tensor parallel: a split along dim ", s.dim, " (stride ", s.stride, ", size ", s.size,
           ") does not fit ", t.describe());
  TS_CHECK(s.stride == 1 || (s.size % s.stride == 0 && (s.size / s.stride) % size == 0),
           "tensor parallel: ", s.stride, " fused blocks of ", s.size / s.stride,
           " do not divide among ", size, " ranks");
}

}  // namespace

TensorParallelLayout tensor_parallel_layout(nn::Module& model) {
  TensorParallelLayout out;
  collect(model, "", out);
  return out;
}

nlohmann::json layout_to_json(const TensorParallelLayout& layout) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [name, s] : layout)
    j[name] = {{"dim", s.dim}, {"stride", s.stride}, {"size", s.size}};
  return j;
}

TensorParallelLayout layout_from_json(const nlohmann::json& j, const std::string& where) {
  TS_CHECK(j.is_object(), where, ": the tensor-parallel layout must be an object, found ",
           j.dump());
  TensorParallelLayout out;
  for (const auto& [name, v] : j.items()) {
    const io::JsonFields f(v, where + ": '" + name + "'");
    out[name] = {f.integer("dim", 0, 7), f.integer("stride", 1, 1 << 20),
                 f.integer("size", 1, int64_t{1} << 40)};
  }
  return out;
}

Shape shard_shape(Shape whole, const TensorParallelSplit& s, int size) {
  TS_CHECK(s.dim >= 0 && static_cast<size_t>(s.dim) < whole.size(), "tensor parallel: dim ", s.dim,
           " does not fit shape ", shape_str(whole));
  whole[static_cast<size_t>(s.dim)] = per_rank(s, size);
  return whole;
}

Tensor shard_of_whole(const Tensor& whole, const TensorParallelSplit& s, int rank, int size) {
  check_split(whole, s, size);
  TS_CHECK(whole.size(s.dim) == s.size, "tensor parallel: the whole tensor ", whole.describe(),
           " should have ", s.size, " along dim ", s.dim);
  NoGradGuard no_grad;
  const int64_t per = per_rank(s, size);
  if (s.stride == 1) {
    const int64_t start = rank * per, have = std::max<int64_t>(0, std::min(per, s.size - start));
    if (have == per) return whole.narrow(s.dim, start, per).contiguous();
    Shape shape = whole.shape();
    shape[static_cast<size_t>(s.dim)] = per;
    Tensor out = zeros(shape, whole.dtype(), whole.device());  // padding rows
    if (have > 0) out.narrow(s.dim, 0, have).copy_(whole.narrow(s.dim, start, have));
    return out;
  }
  const int64_t block = s.size / s.stride, piece = per / s.stride;
  std::vector<Tensor> parts;
  for (int64_t b = 0; b < s.stride; ++b)
    parts.push_back(whole.narrow(s.dim, b * block + rank * piece, piece));
  return cat(parts, s.dim);
}

Tensor whole_from_shards(const std::vector<Tensor>& shards, const TensorParallelSplit& s) {
  TS_CHECK(!shards.empty(), "tensor parallel: no shards to merge");
  const int size = static_cast<int>(shards.size());
  check_split(shards[0], s, size);
  const int64_t per = per_rank(s, size);
  for (const Tensor& t : shards)
    TS_CHECK(t.dim() == shards[0].dim() && t.size(s.dim) == per, "tensor parallel: a shard ",
             t.describe(), " should have ", per, " along dim ", s.dim, " (", s.size, " over ", size,
             " ranks)");
  NoGradGuard no_grad;
  if (s.stride == 1) return cat(shards, s.dim).narrow(s.dim, 0, s.size).contiguous();
  const int64_t part = per / s.stride;  // each rank's piece of one block
  std::vector<Tensor> pieces;
  for (int64_t b = 0; b < s.stride; ++b)
    for (const Tensor& t : shards) pieces.push_back(t.narrow(s.dim, b * part, part));
  return cat(pieces, s.dim);
}

std::map<std::string, Tensor> shard_state(const std::map<std::string, Tensor>& whole,
                                          const TensorParallelLayout& layout, int rank, int size) {
  std::map<std::string, Tensor> out;
  for (const auto& [key, t] : whole) {
    const TensorParallelSplit* s = split_of(layout, key);
    out[key] = s ? shard_of_whole(t, *s, rank, size) : t;
  }
  return out;
}

std::map<std::string, Tensor> merge_states(const std::vector<std::map<std::string, Tensor>>& ranks,
                                           const TensorParallelLayout& layout) {
  TS_CHECK(!ranks.empty(), "tensor parallel: no rank states to merge");
  std::map<std::string, Tensor> out;
  for (const auto& [key, first] : ranks[0]) {
    const TensorParallelSplit* s = split_of(layout, key);
    if (!s) {
      out[key] = first;
      continue;
    }
    std::vector<Tensor> shards;
    for (size_t r = 0; r < ranks.size(); ++r) {
      auto it = ranks[r].find(key);
      TS_CHECK(it != ranks[r].end(), "tensor parallel: rank ", r, "'s state has no '", key,
               "' (rank 0's has)");
      shards.push_back(it->second);
    }
    out[key] = whole_from_shards(shards, *s);
  }
  return out;
}

void load_whole_state(nn::Module& model, const std::map<std::string, Tensor>& whole, int rank,
                      int size) {
  const TensorParallelLayout layout = tensor_parallel_layout(model);
  std::map<std::string, Tensor> mine;
  for (const auto& [name, t] : model.state_dict()) {
    auto it = whole.find(name);
    TS_CHECK(it != whole.end(), "tensor parallel: the whole state has no '", name, "'");
    auto s = layout.find(name);
    mine[name] = s == layout.end() ? it->second : shard_of_whole(it->second, s->second, rank, size);
  }
  model.load_state_dict(mine);
}

}  // namespace tessera::parallel
