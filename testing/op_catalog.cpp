#include "tessera/op_catalog.h"

#include <cmath>

#include "catalog_builders.h"

namespace tessera::testing {

namespace {

std::vector<OpSpec> build_catalog() {
  std::vector<OpSpec> ops;
  catalog::add_elementwise_ops(ops);
  catalog::add_reduce_ops(ops);
  catalog::add_matmul_ops(ops);
  catalog::add_nn_ops(ops);
  catalog::add_attention_ops(ops);
  catalog::add_shape_ops(ops);
  catalog::add_optim_ops(ops);
  catalog::add_creation_ops(ops);
  return ops;
}

Tensor make_input(const InputSpec& spec, Generator& gen) {
  Shape shape = spec.shape;
  if (spec.transposed) std::swap(shape[shape.size() - 1], shape[shape.size() - 2]);
  Tensor t;
  const Tensor u = rand(shape, DType::Float64, Device::cpu(), &gen);
  switch (spec.kind) {
    case InputKind::Normal:
      t = randn(shape, DType::Float64, Device::cpu(), &gen);
      break;
    case InputKind::Positive:
      t = u * 1.5 + 0.5;
      break;
    case InputKind::AwayFromZero: {
      const Tensor sign = rand(shape, DType::Float64, Device::cpu(), &gen);
      t = where(lt(sign, scalar_tensor(0.5, DType::Float64)), -(u + 0.5), u + 0.5);
      break;
    }
    case InputKind::SmallInt:
      t = (u * 3.0).to(DType::Int64).to(DType::Float64);
      break;
    case InputKind::Index:
    case InputKind::IndexOrIgnore: {
      t = (u * static_cast<double>(spec.high)).to(DType::Int64);
      if (spec.kind == InputKind::IndexOrIgnore) {
        const Tensor drop = rand(shape, DType::Float64, Device::cpu(), &gen);
        t = where(lt(drop, scalar_tensor(0.25, DType::Float64)), full({}, -100, DType::Int64), t);
      }
      break;
    }
    case InputKind::Mask: {
      t = lt(u, scalar_tensor(0.7, DType::Float64));
      t.select(-1, 0).fill_(1.0);
      break;
    }
  }
  if (spec.transposed) t = t.transpose(-1, -2);
  return t;
}

}  // namespace

const std::vector<OpSpec>& op_catalog() {
  static const std::vector<OpSpec> catalog = build_catalog();
  return catalog;
}

const OpSpec* find_op(const std::string& name) {
  for (const OpSpec& s : op_catalog())
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<Tensor> make_inputs(const OpCase& c, uint64_t seed) {
  Generator gen(seed);
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  for (const InputSpec& s : c.inputs) out.push_back(make_input(s, gen));
  return out;
}

bool is_float_input(const InputSpec& s) {
  return s.kind != InputKind::Index && s.kind != InputKind::IndexOrIgnore &&
         s.kind != InputKind::Mask;
}

}  // namespace tessera::testing
