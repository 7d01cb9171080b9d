#include <nlohmann/json.hpp>

#include "tessera/io/files.h"
#include "tessera/io/json_fields.h"
#include "tessera/models/pretrained.h"
#include "tessera/ops.h"

namespace tessera::models {

namespace {

Tensor int_matrix(const nlohmann::json& j, const std::string& key, const std::string& path) {
  TS_CHECK(j[key].is_array() && !j[key].empty() && j[key][0].is_array(), "'", path, "': \"", key,
           "\" must be a non-empty list of lists of integers");
  const int64_t rows = static_cast<int64_t>(j[key].size()),
                cols = static_cast<int64_t>(j[key][0].size());
  std::vector<int64_t> v;
  for (int64_t r = 0; r < rows; ++r) {
    const auto& row = j[key][r];
    TS_CHECK(row.is_array() && static_cast<int64_t>(row.size()) == cols, "'", path, "': \"", key,
             "\" row ", r, " has ", row.size(), " entries, expected ", cols);
    for (const auto& x : row) {
      TS_CHECK(io::JsonFields::is_int64(x), "'", path, "': \"", key, "\" row ", r,
               " holds a non-integer or one out of range: ", x.dump());
      v.push_back(x.get<int64_t>());
    }
  }
  return from_vector(v, {rows, cols});
}

}  // namespace

models::Batch read_batch_json(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail("'", path, "': invalid JSON: ", e.what());
  }
  TS_CHECK(j.is_object() && j.contains("input_ids"), "'", path,
           "': expected an object with \"input_ids\"");
  models::Batch b;
  b.input_ids = int_matrix(j, "input_ids", path);
  if (j.contains("targets")) b.targets = int_matrix(j, "targets", path);
  if (j.contains("attention_mask")) b.attention_mask = int_matrix(j, "attention_mask", path);
  if (j.contains("token_type_ids")) b.token_type_ids = int_matrix(j, "token_type_ids", path);
  if (j.contains("next_sentence_label")) {
    const auto& nsp = j["next_sentence_label"];
    TS_CHECK(nsp.is_array() && static_cast<int64_t>(nsp.size()) == b.input_ids.shape()[0], "'",
             path, "': \"next_sentence_label\" must be a list of ", b.input_ids.shape()[0],
             " integers (one per row)");
    std::vector<int64_t> labels;
    for (const auto& x : nsp) {
      TS_CHECK(io::JsonFields::is_int64(x), "'", path,
               "': \"next_sentence_label\" holds a non-integer or one out of range: ", x.dump());
      labels.push_back(x.get<int64_t>());
    }
    b.next_sentence_label = from_vector(labels, {static_cast<int64_t>(labels.size())});
  }
  for (const Tensor* t : {&b.targets, &b.attention_mask, &b.token_type_ids})
    TS_CHECK(!t->defined() || t->shape() == b.input_ids.shape(), "'", path,
             "': every per-token field must be ", shape_str(b.input_ids.shape()),
             " like input_ids, got ", shape_str(t->shape()));
  return b;
}

Batch Batch::to(Device device) const {
  auto move = [&](const Tensor& t) { return t.defined() ? t.to(device) : t; };
  return {move(input_ids),           move(targets), move(attention_mask), move(token_type_ids),
          move(next_sentence_label), target_weight};
}

Batch Batch::first_positions(int64_t positions) const {
  TS_CHECK(positions >= 1, "batch: cannot cut sequences to ", positions, " positions");
  if (!input_ids.defined() || input_ids.dim() != 2 || input_ids.size(1) <= positions) return *this;
  const int64_t T = input_ids.size(1);
  auto cut = [&](const Tensor& t) {
    if (!t.defined()) return t;
    TS_CHECK(t.dim() == 2 && t.size(1) == T, "batch: cutting sequences of ", T,
             " positions: a [B, T] tensor is ", t.describe());
    return t.narrow(1, 0, positions).contiguous();
  };
  return {cut(input_ids),      cut(targets),        cut(attention_mask),
          cut(token_type_ids), next_sentence_label, target_weight};
}

Tensor Batch::weighted(const Tensor& mean) const {
  if (target_weight == 0.0) return mean;
  const double count = static_cast<double>(loss_terms());
  return count == 0 ? mean * 0.0 : mean * (count * target_weight);
}

int64_t Batch::loss_terms() const {
  if (!targets.defined()) return 0;
  const Tensor host = targets.to(Device::cpu()).to(DType::Int64).contiguous();
  const int64_t* t = host.data<int64_t>();
  int64_t n = 0;
  for (int64_t i = 0; i < host.numel(); ++i) n += t[i] != -100;
  return n;
}

}  // namespace tessera::models
