// The flops profiler: counts and times, and DeepSpeed's report of them.
#include "tessera/nn/flops_profiler.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tessera/cuda.h"
#include "tessera/kernel_cost.h"

namespace tessera::nn {

FlopsProfiler::FlopsProfiler(Module& model) : model_(model), device_(Device::cpu()) {
  add_node(model, "", 0);
  for (const Tensor& p : model.parameters()) {
    device_ = p.device();
    break;
  }
}

FlopsProfiler::~FlopsProfiler() {
  stop_profile();
}

size_t FlopsProfiler::add_node(const Module& m, std::string name, int depth) {
  const size_t i = nodes_.size();
  nodes_.push_back({&m, std::move(name), depth, {}});
  index_[&m] = i;
  // A module's params are its own and its submodules' (DeepSpeed's module.__params__).
  for (const Tensor& p : const_cast<Module&>(m).parameters()) nodes_[i].params += p.numel();
  for (const auto& [child_name, child] : m.named_children()) {
    const size_t c = add_node(*child, child_name, depth + 1);
    nodes_[i].children.push_back(c);
  }
  return i;
}

void FlopsProfiler::start_profile() {
  end_profile();
  resume_profile();
}

void FlopsProfiler::resume_profile() {
  if (started_) return;
  stack_.clear();
  add_kernel_observer(*this);
  add_module_observer(*this);
  started_ = true;
}

void FlopsProfiler::stop_profile() {
  if (!started_) return;
  remove_kernel_observer(*this);
  remove_module_observer(*this);
  started_ = false;
}

void FlopsProfiler::end_profile() {
  stop_profile();
  for (Node& n : nodes_) {
    n.flops = n.macs = 0;
    n.duration = 0;
    n.open.clear();
  }
}

void FlopsProfiler::kernel_begin(Kernel k, Device, const KernelCall& call) {
  const KernelCost cost = kernel_cost(k, call);
  // Kernels outside every open scope of this model count towards the model itself.
  Node& n = nodes_[stack_.empty() ? 0 : stack_.back()];
  n.flops += cost.flops;
  n.macs += cost.macs;
}

void FlopsProfiler::module_enter(const Module& m) {
  auto it = index_.find(&m);
  if (it == index_.end()) return;  // another model's module
  synchronize_device(device_);     // time this module's work, not what was queued before it
  stack_.push_back(it->second);
  nodes_[it->second].open.push_back(std::chrono::steady_clock::now());
}

void FlopsProfiler::module_exit(const Module& m) {
  auto it = index_.find(&m);
  if (it == index_.end() || stack_.empty() || stack_.back() != it->second) return;
  synchronize_device(device_);
  Node& n = nodes_[it->second];
  n.duration +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - n.open.back()).count();
  n.open.pop_back();
  stack_.pop_back();
}

FlopsProfiler::Figures FlopsProfiler::total(size_t i) const {
  const Node& n = nodes_[i];
  Figures f{n.params, n.flops, n.macs, n.duration};
  double children_time = 0;
  for (size_t c : n.children) {
    const Figures cf = total(c);
    f.flops += cf.flops;
    f.macs += cf.macs;
    children_time += cf.duration;
  }
  // A container that is never called itself (a ModuleList) takes its children's time.
  if (f.duration == 0) f.duration = children_time;
  return f;
}

FlopsProfiler::Figures FlopsProfiler::figures(const Module& m) const {
  auto it = index_.find(&m);
  TS_CHECK(it != index_.end(), "flops profiler: module '", m.name(), "' is not in the model");
  return total(it->second);
}

namespace {
// DeepSpeed's number_to_string: a unit prefix, 2 decimals, %g.
std::string number_str(double num) {
  const double a = std::fabs(num);
  double magnitude = 1;
  const char* units = "";
  if (a >= 1e12)
    magnitude = 1e12, units = "T";
  else if (a >= 1e9)
    magnitude = 1e9, units = "G";
  else if (a >= 1e6)
    magnitude = 1e6, units = "M";
  else if (a >= 1e3)
    magnitude = 1e3, units = "K";
  else if (a >= 1 || a == 0)
    magnitude = 1, units = "";
  else if (a >= 1e-3)
    magnitude = 1e-3, units = "m";
  else
    magnitude = 1e-6, units = "u";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g %s", std::round(num / magnitude * 100) / 100, units);
  return buf;
}
std::string params_str(double n) {
  std::string s = number_str(n);
  std::replace(s.begin(), s.end(), 'G', 'B');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}
std::string macs_str(double n) {
  return number_str(n) + "MACs";
}
std::string flops_str(double n) {
  return number_str(n) + "FLOPS";
}
std::string duration_str(double s) {
  return number_str(s) + "s";
}
std::string percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", whole ? std::round(100 * part / whole * 100) / 100 : 0.0);
  return buf;
}
// Python's repr of round(x, 2): the shortest digits, ".0" on whole numbers.
std::string python_float(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, std::round(x * 100) / 100);
  std::string s(buf, ec == std::errc() ? end : buf);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}
// DeepSpeed's line_fmt '{:<70}  {:<8}'.
std::string line(const std::string& label, const std::string& value) {
  std::string l = label;
  if (l.size() < 70) l.resize(70, ' ');
  std::string v = value;
  if (v.size() < 8) v.resize(8, ' ');
  return l + "  " + v + "\n";
}
// Indents every line but the first by two spaces (torch's _addindent).
std::string indent(const std::string& s) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}
}  // namespace

std::string FlopsProfiler::tree(size_t i, const Figures& whole) const {
  const Node& n = nodes_[i];
  const Figures f = total(i);
  const std::string extra =
      params_str(static_cast<double>(f.params)) + " = " + percent(f.params, whole.params) +
      "% Params, " + macs_str(static_cast<double>(f.macs)) + " = " + percent(f.macs, whole.macs) +
      "% MACs, " + duration_str(f.duration) + " = " + percent(f.duration, whole.duration) +
      "% latency, " + flops_str(f.duration ? std::round(f.flops / f.duration * 100) / 100 : 0);
  const std::string type = n.module->type_name();
  if (n.children.empty()) return type + "(" + extra + ")";
  std::string s = type + "(\n  " + extra;
  for (size_t c : n.children) s += "\n  (" + nodes_[c].name + "): " + indent(tree(c, whole));
  return s + "\n)";
}

std::string FlopsProfiler::aggregated(const FlopsProfileOptions& options) const {
  // Per depth, per module type (in the order first met): MACs, params, time.
  struct Sums {
    std::string type;
    double macs = 0, params = 0, time = 0;
  };
  std::vector<std::vector<Sums>> info;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (static_cast<size_t>(n.depth) >= info.size()) info.resize(n.depth + 1);
    auto& row = info[n.depth];
    const std::string type = n.module->type_name();
    auto it = std::find_if(row.begin(), row.end(), [&](const Sums& s) { return s.type == type; });
    if (it == row.end()) it = row.insert(row.end(), Sums{type});
    const Figures f = total(i);
    it->macs += static_cast<double>(f.macs);
    it->params += static_cast<double>(n.params);
    it->time += f.duration;
  }
  // As DeepSpeed: depths 0 .. module_depth - 1 (with -1, all but the innermost).
  const int64_t depth =
      options.module_depth == -1 ? static_cast<int64_t>(info.size()) - 1 : options.module_depth;
  std::string out = "Top " + std::to_string(options.top_modules) +
                    " modules in terms of params, MACs or fwd latency at different model depths:\n";
  auto top = [&](std::vector<Sums> row, double Sums::*key, std::string (*fmt)(double)) {
    std::stable_sort(row.begin(), row.end(),
                     [&](const Sums& a, const Sums& b) { return a.*key > b.*key; });
    std::string s = "{";
    const size_t n = std::min<size_t>(row.size(), static_cast<size_t>(options.top_modules));
    for (size_t i = 0; i < n; ++i)
      s += (i ? ", '" : "'") + row[i].type + "': '" + fmt(row[i].*key) + "'";
    return s + "}";
  };
  for (int64_t d = 0; d < depth && d < static_cast<int64_t>(info.size()); ++d) {
    out += "depth " + std::to_string(d) + ":\n";
    out += "    params      - " + top(info[d], &Sums::params, params_str) + "\n";
    out += "    MACs        - " + top(info[d], &Sums::macs, macs_str) + "\n";
    out += "    fwd latency - " + top(info[d], &Sums::time, duration_str) + "\n";
  }
  return out;
}

namespace {
// The summary's figures, DeepSpeed's lines in its order (the engine's when it gave them).
std::string summary_lines(const FlopsProfileSummary& s, const FlopsProfiler::Figures& whole) {
  const double flops = static_cast<double>(whole.flops);
  std::ostringstream o;
  const bool engine = s.micro_batch_size > 0;
  if (engine) {
    o << line("world size: ", std::to_string(s.world_size))
      << line("data parallel size: ", std::to_string(s.data_parallel_size))
      << line("model parallel size: ", std::to_string(s.model_parallel_size))
      << line("batch size per GPU: ", std::to_string(s.micro_batch_size));
    if (s.forwards > 1)
      o << line("forwards profiled (micro-batches of the step): ", std::to_string(s.forwards));
  }
  o << line("params per GPU: ", params_str(whole.params))
    << line("params of model = params per GPU * mp_size: ",
            params_str(static_cast<double>(whole.params * s.model_parallel_size)))
    << line("fwd MACs per GPU: ", macs_str(whole.macs))
    << line("fwd flops per GPU: ", number_str(flops))
    << line("fwd flops of model = fwd flops per GPU * mp_size: ",
            number_str(flops * s.model_parallel_size));
  const double fwd = s.forward_latency.value_or(whole.duration);
  o << line("fwd latency: ", duration_str(fwd))
    << line("fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ",
            flops_str(fwd ? flops / fwd : 0));
  if (s.backward_latency && s.step_latency) {
    const double bwd_factor = 2 + s.recompute_fwd_factor, bwd = *s.backward_latency;
    char f1[32], f2[32];
    std::snprintf(f1, sizeof f1, "%g", bwd_factor);
    std::snprintf(f2, sizeof f2, "%g", bwd_factor + 1);
    o << line("bwd latency: ", duration_str(bwd))
      << line(std::string("bwd FLOPS per GPU = ") + f1 + " * fwd flops per GPU / bwd latency: ",
              flops_str(bwd ? bwd_factor * flops / bwd : 0))
      << line(std::string("fwd+bwd FLOPS per GPU = ") + f2 +
                  " * fwd flops per GPU / (fwd+bwd latency): ",
              flops_str(fwd + bwd ? (bwd_factor + 1) * flops / (fwd + bwd) : 0))
      << line("step latency: ", duration_str(*s.step_latency));
    const double iter = fwd + bwd + *s.step_latency;
    const double rate = iter ? (bwd_factor + 1) * flops / iter : 0;
    o << line("iter latency: ", duration_str(iter))
      << line(std::string("FLOPS per GPU = ") + f2 + " * fwd flops per GPU / iter latency: ",
              flops_str(rate));
    if (s.peak_flops > 0)
      o << line(
          "MFU = FLOPS per GPU / peak (" + flops_str(s.peak_flops) + ", " + s.peak_source + "): ",
          percent(rate, s.peak_flops) + "%");
    if (engine)
      o << line(
          "samples/second: ",
          python_float(iter ? static_cast<double>(s.micro_batch_size * s.forwards * s.world_size) /
                                  iter
                            : 0));
  }
  return o.str();
}
}  // namespace

std::string FlopsProfiler::model_profile(const FlopsProfileSummary& s,
                                         const FlopsProfileOptions& options) const {
  const Figures whole = total(0);
  std::ostringstream o;
  o << "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n"
    << "Profile Summary at step " << s.profile_step << ":\n"
    << "Notations:\n"
       "data parallel size (dp_size), model parallel size(mp_size),\n"
       "number of parameters (params), number of multiply-accumulate operations(MACs),\n"
       "number of floating-point operations (flops), floating-point operations per second "
       "(FLOPS),\n"
       "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
       "step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n";
  o << summary_lines(s, whole);
  o << "\n----------------------------- Aggregated Profile per GPU "
       "-----------------------------\n"
    << aggregated(options);
  if (options.detailed) {
    o << "\n------------------------------ Detailed Profile per GPU "
         "------------------------------\n"
         "Each module profile is listed after its name in the following order: \n"
         "params, percentage of total params, MACs, percentage of total MACs, fwd latency, "
         "percentage of total fwd latency, fwd FLOPS\n\n"
         "Note: 1. Kernels run outside a module's scope (ops called in a forward that opens "
         "no nn::ModuleScope) count towards the nearest enclosing module that opened one. "
         "They make up the difference between a parent's MACs (or latency) and the sum of its "
         "submodules'.\n"
         "2. Number of floating-point operations is a theoretical estimation, thus FLOPS "
         "computed using that could be larger than the maximum system throughput.\n"
         "3. The fwd latency listed in the top module's profile is directly captured at the "
         "module forward function, thus it's less than the fwd latency shown above which is "
         "captured in the engine.\n\n"
      << tree(0, whole) << "\n";
  }
  o << "------------------------------------------------------------------------------\n";
  return o.str();
}

double peak_flops(Device device, DType dtype, std::string* source) {
  if (!device.is_cuda()) return 0;
  const std::string name = cuda_device_name(device.index);
  // Dense tensor-core peaks from NVIDIA's datasheets (SXM parts; float32 without TF32).
  struct Peak {
    const char* part;
    double half, single;
  };
  static const Peak peaks[] = {
      {"H100", 989.4e12, 66.9e12}, {"H200", 989.4e12, 66.9e12}, {"A100", 312e12, 19.5e12}};
  for (const Peak& p : peaks) {
    if (name.find(p.part) == std::string::npos) continue;
    const bool half = dtype == DType::BFloat16 || dtype == DType::Float16;
    if (!half && dtype != DType::Float32) return 0;
    if (source) *source = name + ", " + dtype_name(dtype) + " dense";
    return half ? p.half : p.single;
  }
  return 0;
}

}  // namespace tessera::nn
