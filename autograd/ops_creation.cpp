// Tensor factories.
#include <cmath>

#include "op_util.h"

namespace tessera {

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  KernelAttrs a;
  a.scalar = value;
  TensorBase outs[1] = {t};
  run_kernel(Kernel::fill, device, dtype, {}, outs, a);
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}
Tensor ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}
Tensor zeros_like(const Tensor& t) {
  return zeros(t.shape(), t.dtype(), t.device());
}
Tensor ones_like(const Tensor& t) {
  return ones(t.shape(), t.dtype(), t.device());
}
Tensor scalar_tensor(double value, DType dtype, Device device) {
  return full({}, value, dtype, device);
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  TS_CHECK(step != 0.0, "arange: step must be non-zero");
  const double span = (end - start) / step;
  const int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  Tensor t = Tensor::empty({n}, dtype, device);
  KernelAttrs a;
  a.scalar = start;
  a.scalar2 = step;
  TensorBase outs[1] = {t};
  run_kernel(Kernel::arange, device, dtype, {}, outs, a);
  return t;
}

namespace {
Tensor random_fill(Kernel k, const Shape& shape, DType dtype, Device device, Generator* gen,
                   double a, double b) {
  TS_CHECK(is_floating(dtype), kernel_name(k), ": expected a floating dtype, got ",
           dtype_name(dtype));
  Tensor t = Tensor::empty(shape, dtype, device);
  const GeneratorState s = (gen ? *gen : default_generator()).reserve(t.numel());
  KernelAttrs attrs;
  attrs.seed = s.seed;
  attrs.offset = s.offset;
  attrs.scalar = a;
  attrs.scalar2 = b;
  TensorBase outs[1] = {t};
  run_kernel(k, device, dtype, {}, outs, attrs);
  return t;
}
}  // namespace

Tensor rand(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return random_fill(Kernel::uniform, shape, dtype, device, gen, 0.0, 1.0);
}
Tensor randn(const Shape& shape, DType dtype, Device device, Generator* gen) {
  return random_fill(Kernel::normal, shape, dtype, device, gen, 0.0, 1.0);
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                   Device device) {
  TS_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
           " values do not fill shape ", shape_str(shape));
  Tensor host = Tensor::empty(shape, DType::Float64);
  std::copy(values.begin(), values.end(), host.data<double>());
  return host.to(dtype).to(device);
}

Tensor from_vector(const std::vector<int64_t>& values, const Shape& shape, DType dtype,
                   Device device) {
  TS_CHECK(static_cast<int64_t>(values.size()) == numel_of(shape), "from_vector: ", values.size(),
           " values do not fill shape ", shape_str(shape));
  Tensor host = Tensor::empty(shape, DType::Int64);
  std::copy(values.begin(), values.end(), host.data<int64_t>());
  return host.to(dtype).to(device);
}

Tensor from_vector(std::initializer_list<double> values, const Shape& shape, DType dtype,
                   Device device) {
  return from_vector(std::vector<double>(values), shape, dtype, device);
}

}  // namespace tessera
