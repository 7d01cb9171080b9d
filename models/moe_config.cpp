#include "tessera/models/moe_config.h"

#include <nlohmann/json.hpp>

#include "tessera/io/config_section_registry.h"
#include "tessera/io/train_config.h"
#include "tessera/parallel/pipeline_config.h"
#include "tessera/parallel/tensor_parallel_config.h"
#include "tessera/parallel/zero_config.h"

namespace tessera::models {

parallel::MoEOptions MoELayout::layer_options(int64_t layer) const {
  parallel::MoEOptions o = options;
  int64_t index = 0;  // among the MoE layers
  for (int64_t l = 0; l < layer; ++l) index += is_moe_layer(l);
  o.num_experts =
      num_experts.size() == 1 ? num_experts[0] : num_experts.at(static_cast<size_t>(index));
  return o;
}

void MoELayout::validate(int64_t n_layer, const std::string& section) const {
  TS_CHECK(expert_interval >= 1 && expert_interval <= n_layer, section,
           ".expert_interval: ", expert_interval, " must be in [1, n_layer ", n_layer,
           "] (a MoE layer every that many)");
  const int64_t layers = moe_layers(n_layer);
  TS_CHECK(num_experts.size() == 1 || static_cast<int64_t>(num_experts.size()) == layers, section,
           ".num_experts: ", num_experts.size(), " counts for ", layers, " MoE layers (n_layer ",
           n_layer, ", expert_interval ", expert_interval,
           "): give one count, or one per MoE layer");
  for (int64_t l = 0; l < n_layer; ++l)
    if (is_moe_layer(l)) layer_options(l).validate(section, static_cast<int>(ep_size));
}

std::string MoELayout::to_json() const {
  const nn::MoEGateOptions& g = options.gate;
  return nlohmann::json{{"num_experts", num_experts},
                        {"expert_interval", expert_interval},
                        {"k", g.k},
                        {"capacity_factor", g.capacity_factor},
                        {"eval_capacity_factor", g.eval_capacity_factor},
                        {"min_capacity", g.min_capacity},
                        {"use_residual", options.use_residual},
                        {"noisy_gate_policy", nn::noisy_gate_policy_name(g.noisy_gate_policy)},
                        {"drop_tokens", g.drop_tokens},
                        {"use_rts", g.use_rts},
                        {"top2_2nd_expert_sampling", g.top2_2nd_expert_sampling}}
      .dump();
}

MoELayout MoELayout::from_json(const std::string& text) {
  const auto j = nlohmann::json::parse(text);
  MoELayout m;
  m.num_experts = j.at("num_experts").get<std::vector<int64_t>>();
  m.expert_interval = j.at("expert_interval");
  nn::MoEGateOptions& g = m.options.gate;
  g.k = j.at("k");
  g.capacity_factor = j.at("capacity_factor");
  g.eval_capacity_factor = j.at("eval_capacity_factor");
  g.min_capacity = j.at("min_capacity");
  m.options.use_residual = j.at("use_residual");
  g.noisy_gate_policy =
      nn::noisy_gate_policy_from_name(j.at("noisy_gate_policy"), "tessera_moe.noisy_gate_policy");
  g.drop_tokens = j.at("drop_tokens");
  g.use_rts = j.at("use_rts");
  g.top2_2nd_expert_sampling = j.at("top2_2nd_expert_sampling");
  return m;
}

namespace {

constexpr int64_t kMaxExperts = 65536;
constexpr double kMaxCapacityFactor = 64;

}  // namespace

void MoEConfig::parse(io::config::Section& s, MoEConfig& out) {
  out.stated = !s.stated_keys().empty();
  MoELayout& m = out.layout;
  nn::MoEGateOptions& g = m.options.gate;
  s.notes(
      {{"", "Tessera's: the built-in models' MLPs as DeepSpeed MoE layers (docs/moe.md)"},
       {"num_experts", "required: experts per MoE layer; a list: one count per MoE layer (PR-MoE)"},
       {"expert_interval", "layer l (from 0) is a MoE layer when (l + 1) % expert_interval == 0"},
       {"ep_size", "expert-parallel ranks each layer's experts are spread over"},
       {"k", "experts per token (1 or 2)"},
       {"aux_loss_coef", "the load-balancing loss's weight in the training loss"},
       {"gating_groups", "a rank's tokens gated in this many groups (1: DeepSpeed's)"},
       {"noisy_gate_policy", "None, Jitter or RSample (top-1, training only)"},
       {"capacity_factor", "an expert's buffer: capacity_factor x k x tokens / experts"},
       {"eval_capacity_factor", "capacity_factor in evaluation"},
       {"min_capacity", "the least buffer an expert gets"},
       {"use_residual", "PR-MoE: a dense MLP beside the experts, mixed by a learned softmax"},
       {"drop_tokens", "false: the buffer grows to the busiest expert's load (none dropped)"},
       {"use_rts", "top-1: an over-full expert keeps random tokens, not the first ones"},
       {"top2_2nd_expert_sampling", "top-2: Gumbel noise picks the second expert"}});
  const auto& n = s.raw("num_experts", "integer or list of integers");  // (required)
  if (n.is_number_integer()) {
    m.num_experts = {n.get<int64_t>()};
  } else if (!n.is_null()) {
    m.num_experts = s.non_negative_integers("num_experts", 1, "a count or a list of counts");
  }
  // (Every key is read, stated or not, so the config reference lists them.)
  const bool on = out.stated;
  TS_CHECK(!on || !n.is_null(), s.source(), ": '", s.key("num_experts"), "' is missing: '",
           s.key(s.stated_keys().front()), "' states a MoE layout, which needs the expert count");
  s.expect("num_experts", !on || !m.num_experts.empty(), n.dump(),
           "an integer from 1 to 65536 or a list of them");
  // (Bounds: a config cannot ask for more experts, or larger buffers, than a machine builds.)
  for (int64_t e : m.num_experts)
    s.expect("num_experts", e >= 1 && e <= kMaxExperts, n.dump(), "counts from 1 to 65536");
  s.get_min<int64_t>("expert_interval", m.expert_interval, 1, ">= 1");
  s.get_min<int64_t>("ep_size", m.ep_size, 1, ">= 1");
  s.get("k", g.k);
  s.expect("k", g.k == 1 || g.k == 2, g.k, "1 or 2");
  s.get("capacity_factor", g.capacity_factor);
  s.expect("capacity_factor", g.capacity_factor > 0 && g.capacity_factor <= kMaxCapacityFactor,
           g.capacity_factor, "> 0 and <= 64");
  s.get("eval_capacity_factor", g.eval_capacity_factor);
  s.expect("eval_capacity_factor",
           g.eval_capacity_factor > 0 && g.eval_capacity_factor <= kMaxCapacityFactor,
           g.eval_capacity_factor, "> 0 and <= 64");
  s.get_min<int64_t>("min_capacity", g.min_capacity, 0, "from 0 to 65536");
  s.expect("min_capacity", g.min_capacity <= kMaxExperts, g.min_capacity, "from 0 to 65536");
  s.get("use_residual", m.options.use_residual);
  std::string policy = "None";
  s.get("noisy_gate_policy", policy);
  g.noisy_gate_policy =
      nn::noisy_gate_policy_from_name(policy, s.source() + ": 'moe.noisy_gate_policy'");
  s.get("drop_tokens", g.drop_tokens);
  s.get("use_rts", g.use_rts);
  s.get("top2_2nd_expert_sampling", g.top2_2nd_expert_sampling);
  s.get("aux_loss_coef", m.aux_loss_coef);
  s.expect("aux_loss_coef", m.aux_loss_coef >= 0, m.aux_loss_coef, ">= 0");
  s.get_min<int64_t>("gating_groups", m.options.gating_groups, 1, ">= 1");
}

std::optional<MoELayout> moe_of(const io::TrainConfig& cfg) {
  const MoEConfig& m = cfg.section<MoEConfig>();
  if (!m.stated) return std::nullopt;
  return m.layout;
}

namespace {

// What MoE does not combine with yet, before anything is built.
void check_moe(io::TrainConfig& cfg) {
  const MoEConfig& m = cfg.section<MoEConfig>();
  if (!m.stated) return;
  TS_CHECK(cfg.model.type == "gpt2" || cfg.model.type == "bert", cfg.source,
           ": 'moe' turns GPT-2's and BERT's feed-forward layers into MoE layers; model.type \"",
           cfg.model.type, "\" has no MoE layers yet");
  TS_CHECK(cfg.model.init_from.empty(), cfg.source,
           ": 'moe' with model.init_from: a dense checkpoint has no experts to load");
  m.layout.validate(cfg.model.n_layer);
  const int64_t tokens = cfg.micro_batch_size * cfg.model.block_size;
  TS_CHECK(tokens % m.layout.options.gating_groups == 0, cfg.source, ": 'moe.gating_groups' ",
           m.layout.options.gating_groups, " does not divide a micro-batch's ", tokens,
           " tokens (train_micro_batch_size_per_gpu x model.block_size)");
  TS_CHECK(cfg.world_size % m.layout.ep_size == 0, cfg.source, ": 'moe.ep_size' ", m.layout.ep_size,
           " does not divide the ", cfg.world_size, " data-parallel ranks");
  TS_CHECK(parallel::pipeline_config(cfg).stages == 1, cfg.source,
           ": 'moe' in a pipeline (pipeline.stages > 1) is not built yet");
  TS_CHECK(!parallel::tensor_parallel_config(cfg).sequence_parallel, cfg.source,
           ": 'moe' with tensor_parallel.sequence_parallel is not built yet (each rank would gate "
           "its own chunk of the sequence)");
  const auto stage = parallel::zero_config(cfg).stage;
  TS_CHECK(m.layout.ep_size == 1 || stage < 3, cfg.source, ": zero_optimization.stage ", stage,
           " with MoE expert parallelism ('moe.ep_size' ", m.layout.ep_size,
           " > 1) is not built yet; use stage 1 or 2, or ep_size 1");
}

const io::RegisterConfigSection<MoEConfig> kMoESection{"moe", check_moe};

}  // namespace

}  // namespace tessera::models
