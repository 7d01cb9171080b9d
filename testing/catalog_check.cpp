// check_op: each catalog op against an independent reference. On the device and dtype under
// test the reference is the float64 CPU result on the same rounded inputs; the float64 CPU
// result itself is compared with PyTorch (CatalogReference), never with itself; float64
// gradients are also compared with finite differences.
#include <cmath>

#include "tessera/grad_mode.h"
#include "tessera/op_catalog.h"
#include "tessera/ops.h"

namespace tessera::testing {

namespace {

Tolerance scaled(Tolerance t, double f) {
  return {t.rtol * f, t.atol * f};
}

// Float64 against float64 computed another way (PyTorch, or Python's Philox).
constexpr Tolerance kFloat64Reference{1e-10, 1e-12};

struct CaseInputs {
  std::vector<Tensor> ref_in;  // float64 CPU (the dtype's rounding of the base values)
  std::vector<Tensor> dev_in;  // the dtype and device under test
};

CaseInputs prepare(const OpSpec& spec, const OpCase& c, const std::vector<Tensor>& base,
                   Device device, DType dtype) {
  CaseInputs in;
  for (size_t i = 0; i < base.size(); ++i) {
    const bool fl = is_float_input(c.inputs[i]);
    const Tensor rounded = fl ? base[i].to(dtype).to(DType::Float64) : base[i];
    const bool grad = fl && spec.differentiable && c.inputs[i].differentiable;
    Tensor r =
        c.inputs[i].transposed ? rounded.transpose(-1, -2).contiguous().transpose(-1, -2) : rounded;
    in.ref_in.push_back(grad ? r.detach().requires_grad_(true) : r);
    Tensor d = (fl ? rounded.to(dtype) : rounded).to(device);
    if (c.inputs[i].transposed) d = d.transpose(-1, -2).contiguous().transpose(-1, -2);
    in.dev_in.push_back(grad ? d.detach().requires_grad_(true) : d);
  }
  return in;
}

CheckResult result(const OpSpec& spec, const OpCase& c, const char* what, std::string reference,
                   const CompareResult& cr) {
  return {spec.name, c.label, what, std::move(reference), cr.ok, cr.message};
}

// The reference file must hold the values this build's catalog makes.
std::string stale_inputs(const CaseReference& cr, const std::vector<Tensor>& base) {
  if (cr.inputs.size() != base.size()) return "the reference has a different number of inputs";
  for (size_t i = 0; i < base.size(); ++i) {
    const CompareResult r = compare(base[i].contiguous(), cr.inputs[i], Tolerance{0, 0});
    if (!r.ok) return "input " + std::to_string(i) + " differs: " + r.message;
  }
  return "";
}

// Gradients of sum(out * v) for every input that takes one, against `want` (undefined: none).
CompareResult compare_grads(const std::vector<Tensor>& got_in, const std::vector<Tensor>& want,
                            Tolerance tol) {
  CompareResult out;
  out.message = "ok";
  for (size_t i = 0; i < got_in.size(); ++i) {
    if (!got_in[i].requires_grad()) continue;
    if (i >= want.size() || !want[i].defined()) {
      out.ok = false;
      out.message = "input " + std::to_string(i) + ": the reference has no gradient";
      return out;
    }
    CompareResult r = compare(got_in[i].grad().to(Device::cpu()), want[i], tol);
    if (!r.ok) {
      r.message = "input " + std::to_string(i) + ": " + r.message;
      return r;
    }
  }
  return out;
}

// Float64 on the CPU: output and gradient against PyTorch's.
void check_float64_cpu(const OpSpec& spec, const OpCase& c, const CaseInputs& in,
                       const CaseReference& cr, std::vector<CheckResult>& out) {
  const OpContext ctx{DType::Float64, Device::cpu(), c};
  const Tensor y = spec.fn(in.dev_in, ctx);
  const bool float_out = is_floating(y.dtype());
  out.push_back(result(spec, c, "forward", cr.source,
                       compare(y, cr.output, float_out ? kFloat64Reference : Tolerance{0, 0})));
  if (!spec.differentiable) return;
  TS_CHECK(cr.v.defined(), "the reference of ", spec.name, " [", c.label, "] has no gradient");
  sum(y * cr.v).backward();
  out.push_back(result(spec, c, "gradient", cr.source,
                       compare_grads(in.dev_in, cr.grads, kFloat64Reference)));
}

// Another dtype or device: output and gradient against the float64 CPU result.
void check_against_float64(const OpSpec& spec, const OpCase& c, const CaseInputs& in, Device device,
                           DType dtype, std::vector<CheckResult>& out) {
  const Tensor ref = spec.fn(in.ref_in, OpContext{DType::Float64, Device::cpu(), c});
  const Tensor y = spec.fn(in.dev_in, OpContext{dtype, device, c});
  const bool float_out = is_floating(y.dtype());
  if (float_out)
    TS_CHECK(y.dtype() == dtype, "output dtype ", dtype_name(y.dtype()), " != ", dtype_name(dtype));
  const Tolerance tol = tolerance_for(dtype);
  out.push_back(result(spec, c, "forward", "float64 cpu",
                       compare(y.to(Device::cpu()), ref, float_out ? tol : Tolerance{0, 0})));
  if (!spec.differentiable) return;
  Generator gen(99);
  const Tensor v = randn(ref.shape(), DType::Float64, Device::cpu(), &gen);
  sum(ref * v).backward();
  sum(y.to(Device::cpu()) * v.to(y.dtype())).backward();
  std::vector<Tensor> want;
  for (const Tensor& t : in.ref_in) want.push_back(t.requires_grad() ? t.grad() : Tensor());
  out.push_back(
      result(spec, c, "gradient", "float64 cpu",
             compare_grads(in.dev_in, want, scaled(tol, is_reduced_float(dtype) ? 4.0 : 1.0))));
}

// Random ops: the values of an independent Philox implementation at this dtype's path, and on
// another device also the CPU's values at the same dtype.
void check_random(const OpSpec& spec, const OpCase& c, Device device, DType dtype,
                  const CaseReference* cr, std::vector<CheckResult>& out) {
  const Tensor y = spec.fn({}, OpContext{dtype, device, c}).to(Device::cpu());
  // Exact on the CPU; off it, `device_ulps` ulps of this dtype (relative, and absolute at
  // magnitude 8 for values near zero, where cos's argument error shows).
  Tolerance exact{0, 0};
  if (!device.is_cpu() && spec.device_ulps > 0) {
    const double ulp = dtype == DType::Float64 ? 0x1p-52 : 0x1p-23;
    exact = {spec.device_ulps * ulp, 8 * spec.device_ulps * ulp};
  }
  if (cr) {
    auto it = cr->output_by_dtype.find(dtype == DType::Float64 ? "float64" : "float32");
    TS_CHECK(it != cr->output_by_dtype.end(), "the reference of ", spec.name, " has no values for ",
             dtype_name(dtype));
    const Tolerance tol = is_reduced_float(dtype) ? tolerance_for(dtype) : exact;
    out.push_back(result(spec, c, "forward", cr->source, compare(y, it->second.to(dtype), tol)));
  }
  if (device.is_cuda()) {
    const Tensor cpu = spec.fn({}, OpContext{dtype, Device::cpu(), c});
    const Tolerance tol = is_reduced_float(dtype) ? Tolerance{0, 0} : exact;
    out.push_back(
        result(spec, c, "forward", std::string("cpu ") + dtype_name(dtype), compare(y, cpu, tol)));
  }
}

CheckResult finite_differences(const OpSpec& spec, const OpCase& c, const CaseInputs& f64) {
  std::vector<Tensor> fd_in;
  for (const Tensor& t : f64.ref_in)
    fd_in.push_back(t.requires_grad() ? t.detach().contiguous().requires_grad_(true) : t);
  const OpContext ctx{DType::Float64, Device::cpu(), c};
  const GradcheckResult gc =
      gradcheck([&](const std::vector<Tensor>& x) { return spec.fn(x, ctx); }, fd_in);
  return {spec.name, c.label, "finite-difference", "finite differences", gc.ok, gc.message};
}

}  // namespace

std::vector<CheckResult> check_op(const OpSpec& spec, Device device, DType dtype,
                                  bool finite_differences_too, const CatalogReference* reference) {
  std::vector<CheckResult> results;
  // The float64 CPU result is what every other check compares with: it is itself checked
  // against the independent reference, never against itself.
  const bool is_reference_path = device.is_cpu() && dtype == DType::Float64;
  uint64_t seed = 1;
  for (const OpCase& c : spec.cases) {
    const std::vector<Tensor> base = make_inputs(c, seed++);
    const CaseReference* cr = reference ? reference->find_case(spec.name, c.label) : nullptr;
    try {
      if (cr) {
        const std::string stale = stale_inputs(*cr, base);
        TS_CHECK(stale.empty(), "the reference file ", reference->path(),
                 " was made for other inputs (", stale,
                 "); regenerate it with tests/fixtures/generate_catalog_fixtures.py");
      }
      if (spec.exact_reference) {
        check_random(spec, c, device, dtype, cr, results);
        continue;
      }
      if (is_reference_path) {
        if (cr) check_float64_cpu(spec, c, prepare(spec, c, base, device, dtype), *cr, results);
      } else {
        check_against_float64(spec, c, prepare(spec, c, base, device, dtype), device, dtype,
                              results);
      }
      if (finite_differences_too && spec.differentiable && spec.finite_differences)
        results.push_back(
            finite_differences(spec, c, prepare(spec, c, base, Device::cpu(), DType::Float64)));
    } catch (const Error& e) {
      results.push_back(
          {spec.name, c.label, "forward", cr ? cr->source : "float64 cpu", false, e.what()});
    }
  }
  return results;
}

}  // namespace tessera::testing
